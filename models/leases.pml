/*
 * models/leases.pml: a lease's TTL on the database clock against its holder's local deadline (issue 30).
 * Checked by scripts/spin-models.mjs (npm run test:models); docs/ARCHITECTURE.md, "Models".
 *
 * What is modelled: the database clock as discrete ticks (now); two lockers taking, renewing and
 * releasing one lease, with or without an at-least-for hold (minHoldMs); every statement and every
 * answer delayed by 0 to DELAY ticks (the clock cannot pass a message's bound while it is on its way);
 * the holder's monotonic clock, which may run behind the database's by up to DRIFT ticks over one
 * deadline's span (rate drift, timer granularity: what the margin is there for). The holder believes
 * it holds while its handle is `held`: from the grant's answer until its local deadline passes (its
 * signal aborts, 'lease-expired'), a renewal tells it the lease was taken or ended, or it releases.
 * Not modelled: failover (a lease row lost with an asynchronous primary is the documented loss window,
 * docs/operations.md, "High availability"; fencing covers it, models/tokens.pml).
 *
 * Names, as the code names them:
 *   held / released / lost (a handle's state) ............................. src/core/handle.ts (BaseHandle.state)
 *   lease_expired / lease_stolen (LockLostReason 'lease-expired' / 'lease-stolen') ... src/core/vocabulary.ts
 *   renewed (an outcome of LeaseManager.renew; 'unavailable', a failed renewal, is not modelled) ... src/lease/lease-manager.ts
 *   sentAt, deadlineAt, armDeadline, leaseMarginMs (MARGIN), ttlMs (TTL), minHoldMs (MINHOLD)
 *                                                       ........................... src/lease/lease-manager.ts
 *   lease_acquire, lease_renew, lease_release, lease_live, lease_live_until, and the row's token,
 *   acquired_at, expires_at, released_at, held_until ...................... sql/leases.sql, pgfence.leases
 *   queued / waiting (a request in its wait line, before and after it found the lease busy)
 *                                                       ....................... src/wait/waiter.ts (WaiterState kinds)
 *
 * Properties (assertions):
 *   1. never two handles `held` at once (asserted where a handle becomes held, the only step that
 *      makes one held);
 *   2. a name kept by an at-least-for hold is not granted again before acquired_at + minHoldMs,
 *      however the lease before ended (hold_end, a ghost the release cannot lower).
 *
 * Broken variants (spin -DBROKEN=n; each must yield a counter-example):
 *   BROKEN=1 (or -DBROKEN): the local deadline counted from when the renewal (or grant) was answered,
 *            not from when it was sent: armDeadline(answeredAt) instead of armDeadline(sentAt).
 *   BROKEN=2: no margin: leaseMarginMs(ttlMs) = 0, so a holder whose clock runs slow believes past expiry.
 */

#ifndef BROKEN
#define BROKEN 0
#endif

#define TTL      4   /* ttlMs, in ticks */
#if BROKEN == 2
#define MARGIN   0   /* BROKEN=2: no margin */
#else
#define MARGIN   1   /* leaseMarginMs(ttlMs): covers DRIFT */
#endif
#define DRIFT    1   /* how far the holder's monotonic clock may run behind the database's over a deadline */
#define DELAY    2   /* the most a statement, or its answer, spends on its way (ticks) */
#define MINHOLD  5   /* minHoldMs, longer than the TTL: the hold outlasts it */
#define TMAX     10  /* the horizon */
#define NC       2   /* lockers */
#define ROUNDS   1   /* leases each locker takes (it may wait and look again any number of times) */

mtype = { queued, waiting, held, released, lost };  /* the waiter's state, then the handle's */
mtype = { none, acquire, renew, release };                     /* the statement on its way to the database */
mtype = { granted, busy, renewed, lease_stolen, lease_expired, answered };  /* the answer on its way back */

/* The database: one pgfence.leases row, on the database clock. */
byte now;
byte token;              /* the row's token (issued by next_token; 0: the placeholder) */
byte acquired_at;
byte expires_at;
bool released_at;        /* released_at IS NOT NULL */
byte held_until;         /* the at-least-for hold's end (0: none) */
byte next_token;
byte hold_end;           /* ghost: acquired_at + minHoldMs of the last grant, 0 once passed */

/* Each locker: its handle and the one statement it has on its way. */
mtype state[NC] = queued;
byte my_token[NC];
byte deadlineAt[NC];     /* local deadline, in database ticks */
byte slow[NC];           /* how far its clock has fallen behind by its deadline (0..DRIFT) */
mtype stmt[NC] = none;       /* the statement on its way (none: nothing) */
byte sentAt[NC];         /* when it was sent */
bool processed[NC];      /* the database has run it; the answer is on its way */
mtype answer[NC] = none;
byte answered_at[NC];    /* when the database answered */
byte min_hold[NC];       /* the minHoldMs its current lease was taken with */

/* lease_live(l, now): until its expiry while not released, and in any case until its at-least-for hold. */
#define lease_live  ((!released_at && expires_at > now) || held_until > now)

/* armDeadline(from): deadlineAt = from + ttlMs - leaseMarginMs(ttlMs); the clock may run DRIFT slow. */
inline armDeadline(c, from) {
  deadlineAt[c] = from + TTL - MARGIN;
  if
  :: slow[c] = 0
  :: slow[c] = DRIFT
  fi
}

/* The database runs locker c's statement at `now` (sql/leases.sql). */
inline run_statement(c) {
  if
  :: stmt[c] == acquire ->                                    /* pgfence.lease_acquire */
     if
     :: lease_live -> answer[c] = busy
     :: else ->
        /* The at-least-for hold of the lease before (however it ended) is over. */
        assert(hold_end <= now);
        next_token++;
        token = next_token;
        acquired_at = now;
        expires_at = now + TTL;
        released_at = false;
        if
        :: min_hold[c] > 0 -> held_until = now + min_hold[c]; hold_end = held_until
        :: else -> held_until = 0; hold_end = 0
        fi;
        answer[c] = granted
     fi
  :: stmt[c] == renew ->                                      /* pgfence.lease_renew */
     if
     :: token == my_token[c] && !released_at && lease_live -> expires_at = now + TTL; answer[c] = renewed
     :: else ->
        if
        :: token != my_token[c] -> answer[c] = lease_stolen   /* taken_over */
        :: else -> answer[c] = lease_expired
        fi
     fi
  :: stmt[c] == release ->                                    /* pgfence.lease_release */
     if
     :: token == my_token[c] && !released_at && lease_live ->
        released_at = true;
        if
        :: acquired_at + min_hold[c] > now && acquired_at + min_hold[c] > held_until -> held_until = acquired_at + min_hold[c]
        :: else -> skip
        fi
     :: else -> skip
     fi;
     answer[c] = answered
  fi;
  processed[c] = true;
  answered_at[c] = now
}

/* The database: runs each statement some time within DELAY of its sending. */
active proctype database() {
end:
  do
  :: atomic { stmt[0] != none && !processed[0] -> run_statement(0) }
  :: atomic { stmt[1] != none && !processed[1] -> run_statement(1) }
  od
}

/* A holder's deadline timer fires (and a read of its signal sees the deadline) once its own clock,
   running `slow` behind, reaches deadlineAt: LeaseHandleImpl.checkDeadline, manager.lose(this,
   'lease-expired'). */
inline deadline_check(c) {
  if
  :: state[c] == held && now >= deadlineAt[c] + slow[c] -> state[c] = lost; deadlineAt[c] = 0; slow[c] = 0
  :: else -> skip
  fi
}

/* The database clock. It cannot pass a statement's or an answer's bound while it is on its way. */
active proctype clock() {
  do
  :: atomic {
       now < TMAX &&
       (stmt[0] == none || (!processed[0] && now < sentAt[0] + DELAY) || (processed[0] && now < answered_at[0] + DELAY)) &&
       (stmt[1] == none || (!processed[1] && now < sentAt[1] + DELAY) || (processed[1] && now < answered_at[1] + DELAY)) ->
       now++;
       deadline_check(0);
       deadline_check(1);
       /* A lease that holds nothing any more stays so until taken: its times no longer matter (this
          keeps the state space small and changes no outcome). */
       if
       :: !lease_live -> acquired_at = 0; expires_at = 0; released_at = false; held_until = 0
       :: else -> skip
       fi;
       if
       :: hold_end <= now -> hold_end = 0
       :: else -> skip
       fi
     }
  :: now == TMAX -> break
  od
}

/* Sends statement s; its answer is taken when it arrives (within DELAY of the database's run). */
inline send(c, s) {
  stmt[c] = s;
  sentAt[c] = now;
  processed[c] = false
}

/* The answer has been taken: nothing is on its way. What an ended handle knew is forgotten (this keeps
   the state space small and changes no outcome). */
inline done(c) {
  stmt[c] = none;
  sentAt[c] = 0;
  processed[c] = false;
  answer[c] = none;
  answered_at[c] = 0;
  if
  :: state[c] == released || state[c] == lost -> my_token[c] = 0; min_hold[c] = 0; deadlineAt[c] = 0; slow[c] = 0
  :: else -> skip
  fi
}

proctype locker(byte c) {
  byte rounds = 0;

end:
  do
  :: atomic {
       state[c] != held && rounds < ROUNDS && now < TMAX ->
       if
       :: state[c] != waiting ->   /* a new request: with or without an at-least-for hold */
          if
          :: min_hold[c] = 0
          :: min_hold[c] = MINHOLD
          fi
       :: else -> skip             /* the waiting head looks again */
       fi;
       send(c, acquire)
     }
     /* The answer arrives. */
     atomic {
       processed[c] ->
       if
       :: answer[c] == granted ->
          my_token[c] = token;
#if BROKEN == 1
          armDeadline(c, now);        /* BROKEN=1: counted from the answer */
#else
          armDeadline(c, sentAt[c]);  /* grantedTo(request, row, sentAt) */
#endif
          /* Never two holders that both believe they hold: a handle becomes held only here. */
          assert(state[1 - c] != held);
          state[c] = held;
          rounds++
       :: else -> state[c] = waiting   /* busy: it waits, and looks again later */
       fi;
       done(c)
     }
  :: atomic {
       /* renew(): only while held (reading `held` checks the deadline). */
       state[c] == held && now < TMAX -> send(c, renew)
     }
     atomic {
       processed[c] ->
       if
       :: answer[c] == renewed ->
          /* renewed(sentAt, expiresAt): the state itself, a late answer does not revive a lost handle. */
          if
          :: state[c] == held ->
#if BROKEN == 1
             armDeadline(c, now)         /* BROKEN=1: counted from the answer */
#else
             armDeadline(c, sentAt[c])   /* renewed(sentAt, expiresAt) */
#endif
          :: else -> skip
          fi
       :: else ->
          if
          :: state[c] == held -> state[c] = lost   /* manager.lose(this, 'lease-stolen' | 'lease-expired') */
          :: else -> skip
          fi
       fi;
       done(c)
     }
  :: atomic {
       /* release(): the handle is released before the statement leaves (markReleased). */
       state[c] == held && now < TMAX -> state[c] = released; send(c, release)
     }
     atomic { processed[c] -> done(c) }
  od
}

init {
  atomic {
    run locker(0);
    run locker(1)
  }
}
