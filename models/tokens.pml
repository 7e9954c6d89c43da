/*
 * models/tokens.pml: fencing tokens across rollback and failover (issue 30, "A model checked in CI").
 * Checked by scripts/spin-models.mjs (npm run test:models); docs/ARCHITECTURE.md, "Models".
 *
 * What is modelled: a primary and an asynchronous replica; the replica holds the primary's state as it
 * was at some earlier moment (replication lags: commits, and the sequence's advances, can be lost on
 * promotion); promotion (a new timeline, the old primary gone with the sessions on it); issuers that
 * take a key's grant, draw a token in its transaction, hand it to their caller at once (an xact lock
 * returns its token before the commit) and then commit or roll back; callers that write later with a
 * guarded write. Three issuers: two of key 0 (whose tokens guard the row), one of key 1; the two keys
 * share the one sequence, so floor moves of different keys can race.
 * Not modelled: a crash and restart of the primary itself (the documented exception: a sequence advance
 * not yet flushed when the server crashes can be handed out again, docs/concepts.md, "Fencing").
 *
 * Names, as the code names them:
 *   next_token (the inline), drawn, issued, floor_token, timeline ........ sql/fencing.sql, pgfence.next_token
 *   token_sequence (nextval / setval; not undone by a rollback) ......... migrations/0004, pgfence.token_sequence
 *   fencing_tokens[k] (the key's counter row, committed with the grant) .. migrations, pgfence.fencing_tokens
 *   mover (LOCK TABLE pgfence.fencing_tokens IN SHARE UPDATE EXCLUSIVE) .. sql/fencing.sql
 *   fencing_token (the guarded row's column), fenced_update: applied / stale
 *                              ..................................... src/fencing (fencedUpdate: `AND fencing_token <= $token`)
 *   idle / dead: the issuer's session (set up with nothing out; ended, as on a demoted primary)
 *                              ..................................... src/session/session-state.ts (SessionState kinds)
 *   F stands for 1 << 48: floor_token(T) = (T - 1) * F; fewer than F tokens per timeline (DESIGN.md, "Fencing").
 *
 * Properties (assertions):
 *   1. no token value is handed out twice, rolled-back ones included (handed_out[]);
 *   2. the guarded row never takes a write of an older grant after a newer grant's write: grants are
 *      numbered in the real-time order they were issued (gen), and the row carries the gen of its last
 *      write through replication; fencing_token <= $token must imply that order.
 *
 * Broken variants (spin -DBROKEN=n; each must yield a counter-example):
 *   BROKEN=1 (or -DBROKEN): the per-key counter that a rollback undoes instead of the sequence:
 *            issued = fencing_tokens[k] + 1 inside the transaction (the code before migrations/0004).
 *   BROKEN=2: no floor on promotion: the `drawn < floor_token` branch of next_token removed.
 *   BROKEN=3: the floor mover does not draw again under the mover lock: `drawn := floor_token`
 *            straight after the first draw, so two keys' first issues on a new timeline both get the floor.
 */

#ifndef BROKEN
#define BROKEN 0
#endif

#define F        8   /* tokens per timeline: (T - 1) * F stands for (T - 1) << 48 */
#define MAXTL    3   /* at most two promotions */
#define NTOKENS  24  /* token values a run can reach: MAXTL * F */

mtype = { idle, dead };           /* the issuer's session: SessionState kinds (src/session/session-state.ts) */
mtype = { applied, stale };       /* the outcome of a guarded write (fencedUpdate) */

typedef Server {
  byte timeline;                  /* pg_walfile_name(pg_current_wal_lsn())'s timeline */
  byte token_sequence;            /* the sequence's last value (nextval returns it + 1) */
  byte fencing_tokens[2];         /* each key's committed counter */
  byte fencing_token;             /* the guarded row's fencing_token column (0: NULL) */
  byte row_gen;                   /* ghost: the grant order of the write the row holds */
}

Server primary;
Server replica;                   /* what the asynchronous standby has replayed */
bool granted[2];                  /* a transaction of the primary holds the key's grant (its lock) */
byte mover;                       /* issuer + 1 holding the mover lock on the primary, 0: none */
byte gen;                         /* ghost: grants issued so far, in real-time order */
bool handed_out[NTOKENS];         /* ghost: every token that has left the server */
hidden mtype outcome;             /* the last guarded write's outcome (not part of the state) */

inline copy_server(to, from) {
  to.timeline = from.timeline;
  to.token_sequence = from.token_sequence;
  to.fencing_tokens[0] = from.fencing_tokens[0];
  to.fencing_tokens[1] = from.fencing_tokens[1];
  to.fencing_token = from.fencing_token;
  to.row_gen = from.row_gen
}

/* nextval('pgfence.token_sequence'): non-transactional, never undone. */
inline nextval(v) {
  primary.token_sequence++;
  v = primary.token_sequence
}

/* The guarded write of a caller holding `issued` (grant order `my_gen`), on the current primary. */
inline fenced_update(issued, my_gen) {
  atomic {
    if
    :: primary.fencing_token <= issued ->
       /* Property 2: the row never goes from a newer grant's write to an older grant's. */
       assert(primary.row_gen <= my_gen);
       primary.fencing_token = issued;
       primary.row_gen = my_gen;
       outcome = applied
    :: else -> outcome = stale
    fi
  }
}

proctype issuer(byte me; byte k; bool writes) {
  byte my_tl, floor_token, drawn, issued, my_gen, writes_left;
  mtype session = idle;

  /* The grant: the key's lock (a session or xact lock, a lease's row), taken on the current primary. */
  atomic { !granted[k] -> granted[k] = true; my_tl = primary.timeline }

  /* pgfence.next_token(k), in the grant's transaction. Every step runs on the server the transaction
     began on: once that server is demoted the session is dead and nothing more happens there. */
  atomic {
    if
    :: primary.timeline != my_tl -> session = dead
    :: else ->
       floor_token = (primary.timeline - 1) * F;
#if BROKEN == 1
       /* BROKEN=1: the per-key counter, bumped inside the transaction: a rollback undoes it. */
       drawn = primary.fencing_tokens[k] + 1;
       if
       :: drawn < floor_token -> drawn = floor_token
       :: else -> skip
       fi
#else
       nextval(drawn)
#endif
    fi
  }
#if BROKEN != 1 && BROKEN != 2
  /* The first issue on a new timeline: move the sequence up to the floor. Movers take turns (the
     mover lock is held to the transaction's end), and each draws again once the lock is its own. */
  if
  :: session == idle && drawn < floor_token ->
     atomic {
       if
       :: primary.timeline != my_tl -> session = dead
       :: primary.timeline == my_tl && mover == 0 -> mover = me + 1
       fi
     };
     atomic {
       if
       :: primary.timeline != my_tl -> session = dead
       :: else ->
#if BROKEN != 3
          nextval(drawn);
#endif
          if
          :: drawn < floor_token -> drawn = floor_token; primary.token_sequence = floor_token  /* setval */
          :: else -> skip
          fi
       fi
     }
  :: else -> skip
  fi;
#endif
  atomic {
    if
    :: session == dead || primary.timeline != my_tl -> session = dead
    :: else ->
       /* greatest(t.token + 1, drawn): the stored counter wins only for a key older than the sequence. */
       if
       :: primary.fencing_tokens[k] + 1 > drawn -> issued = primary.fencing_tokens[k] + 1
       :: else -> issued = drawn
       fi;
       /* Property 1: the token leaves the server now (an xact lock's caller reads it before the commit). */
       assert(issued < NTOKENS);
       assert(!handed_out[issued]);
       handed_out[issued] = true;
       gen++;
       my_gen = gen
    fi
  }

  /* The grant's transaction ends: it commits (the counter with it) or rolls back (the grant ends, its
     token is skipped); on a demoted primary it is simply gone, and so are its locks. */
  atomic {
    if
    :: session == idle && primary.timeline == my_tl -> primary.fencing_tokens[k] = issued  /* COMMIT */
    :: session == idle && primary.timeline == my_tl -> skip                              /* ROLLBACK */
    :: else -> session = dead
    fi;
    if
    :: session == idle ->
       granted[k] = false;
       if
       :: mover == me + 1 -> mover = 0
       :: else -> skip
       fi
    :: else -> skip
    fi
  }

  /* The caller writes later with the token it holds, committed or not, on whichever server is primary
     then (a paused holder included); the same holder may write again. */
  if
  :: issued > 0 && writes -> writes_left = 2
  :: else -> writes_left = 0
  fi;
end_writing:
  do
  :: writes_left > 0 -> fenced_update(issued, my_gen); writes_left--   /* or never again: a valid end */
  :: writes_left == 0 -> break
  od
}

/* The asynchronous standby replays the primary's WAL: at any moment it may catch up with the primary
   (committed rows and the sequence's advances; an open transaction's changes are not committed). */
active proctype walreceiver() {
end:
  do
  :: atomic { replica.timeline == primary.timeline -> copy_server(replica, primary) }
  od
}

/* A failover: the standby is promoted, with what it had replayed; the old primary and every session
   on it are gone (its locks with them); a new standby is made from the new primary. */
active proctype promotion() {
end:
  do
  :: atomic {
       primary.timeline < MAXTL ->
       copy_server(primary, replica);
       primary.timeline = replica.timeline + 1;   /* a new timeline before it accepts writes */
       granted[0] = false;
       granted[1] = false;
       mover = 0;
       copy_server(replica, primary)
     }
  od
}

/* Issuers 0 and 1 grant key 0 and write the guarded row; issuer 2 grants key 1 only. */
init {
  atomic {
    primary.timeline = 1;
    copy_server(replica, primary);
    run issuer(0, 0, true);
    run issuer(1, 0, true);
    run issuer(2, 1, false)
  }
}
