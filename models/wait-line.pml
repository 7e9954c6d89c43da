/*
 * models/wait-line.pml: the wait line's hand-off (issue 30, "A model checked in CI").
 * Checked by scripts/spin-models.mjs (npm run test:models); docs/ARCHITECTURE.md, "Models".
 *
 * What is modelled: one key. PostgreSQL's advisory lock on it, with its FIFO queue (a release hands
 * the lock to the first queued waiter at once; a try succeeds only while the lock is free, so never
 * while anyone is queued), and the release's NOTIFY when a marker shows waiters. One locker's WaitLine
 * for the key with NW local waiters, run as Node runs it: one event at a time (an enqueue, an attempt's
 * answer landing, an operation ending, a NOTIFY, a waiter's timeout, a local holder's release). Only
 * the head attempts: a try, or a blocking wait in PostgreSQL's queue on the waiter session (when that
 * session is free: chosen freely each time); a head that found the key busy announces its wait (listen,
 * the marker, then a look again) and polls, i.e. sleeps until a wake-up. NO other takers (another
 * locker's waiter session, SQL lock_fenced) queue in PostgreSQL and hand the lock over among
 * themselves. A waiter may time out at any moment, also while its attempt is in flight (it leaves; a
 * grant that lands for it is given back before the next looks).
 * Not modelled: the poll's timer, which finds releases nobody announced: every release here is
 * announced, so the model shows that a release wakes the next waiter by itself. Nor the `expired`
 * waiter state (a first attempt still waiting for a connection) or shared holds.
 *
 * Names, as the code names them:
 *   the line's state: idle, operating, attempting, blocking, polling; `woken` (a field of attempting
 *     and blocking); the moves of WAIT_LINE_STATES ........................... src/wait/line-states.ts
 *   a waiter's state: queued, waiting, leaving, settled; the moves of WAITER_STATES . src/wait/waiter.ts
 *   queue, markerSession, serve (drive), attempt, block, land, onGranted, answerGrant, onBusy, occupy,
 *     endOperation, announce, wake (lookAgain), kick, giveUp, leave, settle, schedulePoll
 *                                                     ....................... src/wait/wait-line.ts
 *   listen, then registerMarker (announce's order) ............................. src/wait/announce.ts
 *   granted / Busy (an attempt's outcome), giveBack, blockFirst, heldHere ...... src/wait/strategy.ts
 *   register / unregister (MarkerOp) ............................................ src/wait/marker-sql.ts
 * Every move of the line's and the waiters' states is asserted to be one their table allows.
 *
 * Properties (assertions):
 *   1. never two grants at once: a grant is backed by the database's lock, and nobody else holds;
 *   2. no lost wake-up: the line never rests (idle or polling) with a waiting head while the key is free
 *      and no NOTIFY is on its way (a monitor, in every reachable state);
 *   3. bounded waiting: a local waiter is passed over by at most the local waiters queued before it
 *      (FIFO), and the head waiting in PostgreSQL's queue by at most the requests queued there before
 *      it (docs/concepts.md, "Turns across kinds": granted once the holders queued before it have each
 *      held once).
 *
 * Broken variants (spin -DBROKEN=n; each must yield a counter-example):
 *   BROKEN=1 (or -DBROKEN): a release that grants without checking: a local holder's release hands
 *            the name to the next local waiter at once (answerGrant without an attempt).
 *   BROKEN=2: a waiter allowed to barge: a new request tries at once, ahead of the waiters queued
 *            before it (enqueue's head-only rule dropped).
 *   BROKEN=3: a wake-up lost: lookAgain during an attempt or a blocking wait in flight drops the
 *            wake-up instead of setting `woken`.
 */

#ifndef BROKEN
#define BROKEN 0
#endif

#define NW      3              /* local waiters, ids 1 .. NW (2 or 3) */
#define NO      2              /* other takers, ids NW + 1 .. NW + NO */
#define OROUNDS 2              /* how often each other taker takes the key */
#define NR      (NW + NO)      /* requests that can queue in PostgreSQL */

mtype = { idle, operating, attempting, blocking, polling };   /* LineState kinds */
mtype = { none, queued, waiting, leaving, settled };          /* WaiterState kinds; none: not enqueued yet */
mtype = { sent, in_queue, landed };                           /* where the statement in flight is */
mtype = { granted, Busy };                                    /* what it found */
mtype = { announce, unregister, giveBack };                   /* what an operating line waits for */

/* PostgreSQL: the key's advisory lock, its FIFO queue, the marker, the release's NOTIFY. */
byte owner;                    /* the request holding the lock (0: free) */
byte pgq[NR];                  /* PostgreSQL's queue for the key, first in first out */
byte pglen;
bool db_marker;                /* a marker shows waiters: a release sends NOTIFY */
bool notify_pending;           /* a NOTIFY on its way to the locker's listener */

/* The locker's WaitLine for the key. */
byte queue[NW];                /* waiter ids, first in first out */
byte qlen;
mtype line = idle;             /* the line's state */
byte attempt_for;              /* attemptFor(state): the waiter of attempting / blocking */
bool woken;                    /* attempting / blocking: a wake-up came meanwhile */
bool cancelled;                /* blocking: its cancel was aborted (the waiter left) */
mtype stmt = none;             /* attempting / blocking: the statement's progress */
mtype result = none;
mtype op = none;               /* operating: on what */
bool op_done;                  /* the database has run it */
byte op_for;                   /* giveBack: whose grant goes back */
bool markerSession;            /* not a state: the line's marker is registered */
byte holder;                   /* the local waiter holding the key (heldHere), 0: none */

/* Each local waiter (index 0 unused). */
mtype wstate[NW + 1] = none;
byte ahead[NW + 1];            /* ghost: local waiters queued before it at its enqueue */
byte passed[NW + 1];           /* ghost: local grants to others while it waited */

/* The other takers. */
byte others_holding;
byte pg_ahead;                 /* ghost: requests queued before the line's blocking wait in PostgreSQL */
byte pg_passed;                /* ghost: grants to others since it queued */

hidden byte i, j, w;           /* scratch, within one atomic step */
hidden byte ok, flight, flight_woken;

/* ---- the states' tables (WAIT_LINE_STATES, WAITER_STATES) ---- */

inline move(next) {
  assert(
    (line == idle && (next == operating || next == attempting || next == blocking || next == polling)) ||
    (line == operating && next == idle) ||
    (line == attempting && (next == attempting || next == idle)) ||
    (line == blocking && (next == blocking || next == idle)) ||
    (line == polling && (next == idle || next == operating || next == attempting || next == blocking)));
  line = next
}

inline wmove(x, next) {
  assert(
    (wstate[x] == none && next == queued) ||
    (wstate[x] == queued && (next == waiting || next == leaving || next == settled)) ||
    (wstate[x] == waiting && (next == leaving || next == settled)) ||
    (wstate[x] == leaving && next == settled));
  wstate[x] = next
}

/* ---- PostgreSQL ---- */

inline pg_remove(r) {
  i = 0;
  do
  :: i < pglen && pgq[i] != r -> i++
  :: i < pglen && pgq[i] == r ->
     do
     :: i + 1 < pglen -> pgq[i] = pgq[i + 1]; i++
     :: else -> break
     od;
     pglen--;
     pgq[pglen] = 0;
     break
  :: i >= pglen -> break
  od
}

/* A release of the key: the lock goes to the first queued request (PostgreSQL grants it at once), or
   is free; the release statement's probe finds the marker and sends NOTIFY. */
inline unlock() {
  if
  :: pglen > 0 ->
     owner = pgq[0];
     pg_remove(owner);
     if
     :: owner <= NW ->
        /* The line's blocking wait is granted. */
        assert(owner == attempt_for && line == blocking && stmt == in_queue);
        assert(pg_passed <= pg_ahead);   /* property 3 */
        result = granted;
        stmt = landed
     :: else ->
        if
        :: line == blocking && stmt == in_queue -> pg_passed++; assert(pg_passed <= pg_ahead)   /* property 3 */
        :: else -> skip
        fi
     fi
  :: else -> owner = 0
  fi;
  if
  :: db_marker -> notify_pending = true
  :: else -> skip
  fi
}

/* ---- the WaitLine ---- */

inline remove(x) {
  i = 0;
  do
  :: i < qlen && queue[i] != x -> i++
  :: i < qlen && queue[i] == x ->
     do
     :: i + 1 < qlen -> queue[i] = queue[i + 1]; i++
     :: else -> break
     od;
     qlen--;
     queue[qlen] = 0;
     break
  :: i >= qlen -> break
  od
}

/* finish(waiter): settled, out of the line. */
inline settle(x) {
  if
  :: wstate[x] != settled -> wmove(x, settled); remove(x)
  :: else -> skip
  fi
}

/* The head's grant is answered: property 1 (never two grants at once) and property 3 (FIFO). */
inline answerGrant(x) {
  assert(owner == x && holder == 0 && others_holding == 0);
  for (j : 1 .. NW) {
    if
    :: j != x && (wstate[j] == queued || wstate[j] == waiting) -> passed[j]++; assert(passed[j] <= ahead[j])
    :: else -> skip
    fi
  }
  settle(x);
  holder = x
}

/* occupy(work) / beginOperation(): one operation for the key is in flight. */
inline occupy(o, x) {
  move(operating);
  op = o;
  op_for = x;
  op_done = false
}

/* block(head): a wait in PostgreSQL's queue when the waiter session is free (ok), else null. */
inline block(x) {
  if
  :: ok = true; move(blocking); attempt_for = x; woken = false; cancelled = false; stmt = sent
  :: ok = false
  fi
}

/* attempt(head): blockFirst (a key busy lately) may send a fresh head straight to its blocking wait. */
inline attempt(x) {
  ok = false;
  if
  :: wstate[x] != waiting && !markerSession ->
     if
     :: block(x);                                     /* blockFirst */
        if
        :: ok && wstate[x] == queued -> wmove(x, waiting)
        :: else -> skip
        fi
     :: skip
     fi
  :: else -> skip
  fi;
  if
  :: !ok -> move(attempting); attempt_for = x; woken = false; stmt = sent
  :: else -> skip
  fi
}

/* drive() / serve(): nothing while something is in flight; a local holder makes the head wait for it
   (heldHere); the head attempts; with nobody waiting, the marker is withdrawn; else the line rests. */
inline drive() {
  if
  :: line == operating || line == attempting || line == blocking -> skip
  :: else ->
     if
     :: qlen > 0 && holder != 0 -> skip
     :: qlen > 0 && holder == 0 -> attempt(queue[0])
     :: qlen == 0 && markerSession -> markerSession = false; occupy(unregister, 0)
     :: qlen == 0 && !markerSession ->
        if
        :: line == polling -> move(idle)
        :: else -> skip
        fi
     fi
  fi
}

inline onGranted(x) {
  if
  :: wstate[x] == settled || wstate[x] == leaving -> occupy(giveBack, x)   /* handed back before the next looks */
  :: else -> answerGrant(x); drive()
  fi
}

inline onBusy(x) {
  if
  :: wstate[x] == leaving -> settle(x); drive()
  :: wstate[x] == settled -> drive()
  :: wstate[x] == queued || wstate[x] == waiting ->
     if
     :: flight == blocking ->
        /* A blocking wait ends without a grant only when its waiter gives up (it is leaving then). */
        assert(false)
     :: flight == attempting && wstate[x] == queued ->
        wmove(x, waiting);
        block(x);
        if
        :: !ok -> occupy(announce, x)   /* listen, registerMarker, then look again */
        :: else -> skip
        fi
     :: flight == attempting && wstate[x] == waiting ->
        block(x);
        if
        :: !ok && flight_woken -> drive()
        :: !ok && !flight_woken -> move(polling)   /* schedulePoll: until a wake-up (or the poll) */
        :: else -> skip
        fi
     fi
  fi
}

/* wake() / lookAgain(true): a release was announced. */
inline wake() {
  if
  :: qlen > 0 && wstate[queue[0]] == waiting ->
     if
     :: line == attempting || line == blocking ->
#if BROKEN == 3
        skip                           /* BROKEN=3: the wake-up is dropped */
#else
        if
        :: !woken -> move(line); woken = true
        :: else -> skip
        fi
#endif
     :: line == operating -> skip      /* the operation's end serves the line */
     :: line == idle || line == polling -> drive()
     fi
  :: else -> skip
  fi
}

/* giveUp(waiter): a timeout or an abort. */
inline giveUp(x) {
  if
  :: attempt_for != x -> settle(x); drive()
  :: else ->
     /* leave(): a blocking wait is cancelled; the waiter is answered once its attempt is back. */
     if
     :: line == blocking -> cancelled = true
     :: else -> skip
     fi;
     wmove(x, leaving)
  fi
}

inline enqueue(x) {
  wmove(x, queued);
  ahead[x] = qlen;
  queue[qlen] = x;
  qlen++;
#if BROKEN == 2
  /* BROKEN=2: the new request tries at once, whoever is queued before it. */
  if
  :: qlen > 1 && owner == 0 -> owner = x; answerGrant(x)
  :: else -> skip
  fi;
#endif
  drive()
}

/* Node's event loop for the locker: one event at a time. */
active proctype locker() {
end:
  do
  /* enqueue(request), of each local waiter once */
  :: atomic { wstate[1] == none -> enqueue(1) }
  :: atomic { wstate[2] == none -> enqueue(2) }
#if NW >= 3
  :: atomic { wstate[3] == none -> enqueue(3) }
#endif
  /* The attempt or blocking wait in flight lands: land(), then onLanded. */
  :: atomic {
       stmt == landed ->
       w = attempt_for;
       flight = line;
       flight_woken = woken;
       move(idle);
       attempt_for = 0;
       woken = false;
       cancelled = false;
       stmt = none;
       pg_ahead = 0;
       pg_passed = 0;
       if
       :: result == granted -> result = none; onGranted(w)
       :: else -> result = none; onBusy(w)
       fi
     }
  /* The operation in flight ends: endOperation(). */
  :: atomic {
       line == operating && op_done ->
       if
       :: op == announce -> markerSession = true
       :: op == giveBack && wstate[op_for] == leaving -> settle(op_for)
       :: else -> skip
       fi;
       op = none;
       op_for = 0;
       op_done = false;
       move(idle);
       drive()
     }
  /* A NOTIFY arrives. */
  :: atomic { notify_pending -> notify_pending = false; wake() }
  /* A waiter's timeout (or abort): at any moment before it is answered. */
  :: atomic { (wstate[1] == queued || wstate[1] == waiting) -> giveUp(1) }
  :: atomic { (wstate[2] == queued || wstate[2] == waiting) -> giveUp(2) }
#if NW >= 3
  :: atomic { (wstate[3] == queued || wstate[3] == waiting) -> giveUp(3) }
#endif
  /* The local holder releases: the unlock (with its NOTIFY probe), then kick(). */
  :: atomic {
       holder != 0 ->
       assert(owner == holder);
       holder = 0;
       unlock();
#if BROKEN == 1
       /* BROKEN=1: the next local waiter gets the name without an attempt. */
       if
       :: qlen > 0 && (line == idle || line == polling) -> answerGrant(queue[0])
       :: else -> skip
       fi;
#endif
       drive()
     }
  od
}

/* PostgreSQL runs what the line sent. */
active proctype postgres() {
end:
  do
  /* pg_try_advisory_lock: the head's attempt */
  :: atomic {
       line == attempting && stmt == sent ->
       if
       :: owner == 0 -> assert(pglen == 0); owner = attempt_for; result = granted
       :: else -> result = Busy
       fi;
       stmt = landed
     }
  /* pg_advisory_lock on the waiter session: the head's blocking wait */
  :: atomic {
       line == blocking && stmt == sent ->
       if
       :: owner == 0 -> owner = attempt_for; result = granted; stmt = landed
       :: else -> pg_ahead = pglen; pg_passed = 0; pgq[pglen] = attempt_for; pglen++; stmt = in_queue
       fi
     }
  /* The cancel reaches the blocked statement: it leaves PostgreSQL's queue. */
  :: atomic {
       line == blocking && stmt == in_queue && cancelled ->
       pg_remove(attempt_for);
       result = Busy;
       stmt = landed
     }
  /* The line's operation. */
  :: atomic {
       line == operating && !op_done ->
       if
       :: op == announce -> db_marker = true                    /* registerMarker: MarkerOp.register */
       :: op == unregister -> db_marker = false                 /* MarkerOp.unregister */
       :: op == giveBack -> assert(owner == op_for); unlock()   /* the late grant's release */
       fi;
       op_done = true
     }
  od
}

/* Another taker: pg_advisory_lock (queued in PostgreSQL's queue), hold, a pgfence release. */
proctype other(byte me) {
  byte rounds = 0;
end:
  do
  :: rounds < OROUNDS ->
     atomic {
       if
       :: owner == 0 -> owner = me
       :: else -> pgq[pglen] = me; pglen++
       fi
     };
     atomic {
       owner == me ->
       assert(holder == 0 && others_holding == 0);   /* property 1 */
       others_holding++
     };
     atomic {
       others_holding--;
       unlock();
       rounds++
     }
  :: rounds == OROUNDS -> break
  od
}

/* Property 2: the line never rests with a waiting head while the key is free and no NOTIFY is on its way. */
active proctype monitor() {
  assert(!((line == idle || line == polling) && qlen > 0 && wstate[queue[0]] == waiting && holder == 0 &&
           owner == 0 && others_holding == 0 && !notify_pending))
}

init {
  atomic {
    for (i : 1 .. NO) {
      run other(NW + i)
    }
  }
}
