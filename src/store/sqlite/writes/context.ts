import type Database from "better-sqlite3";
import type { StoreLimits } from "../../store.js";
import { SqliteForks, SqliteLabels } from "../labels.js";
import { SqliteTtl } from "../ttl.js";
import { EventLogWriter } from "./event-log.js";
import { FoldLeases } from "./leases.js";
import { RequestRecords } from "./requests.js";
import { ThreadRows } from "./thread-rows.js";

/**
 * What every write runs with on the write connection (in the worker): the
 * limits and the statements of each table, prepared once. Each write is a
 * function of this and its command (appends.ts, folds.ts, clears.ts,
 * imports.ts, rewind.ts), run inside a transaction group-commit.ts holds.
 */
export interface WriteContext {
  lim: StoreLimits;
  threads: ThreadRows;
  events: EventLogWriter;
  requests: RequestRecords;
  leases: FoldLeases;
  labels: SqliteLabels;
  forks: SqliteForks;
  ttl: SqliteTtl;
}

export function createWriteContext(db: Database.Database, lim: StoreLimits): WriteContext {
  return {
    lim,
    threads: new ThreadRows(db),
    events: new EventLogWriter(db, lim.eventRetention),
    requests: new RequestRecords(db, lim),
    leases: new FoldLeases(db),
    labels: new SqliteLabels(db),
    forks: new SqliteForks(db),
    ttl: new SqliteTtl(db),
  };
}
