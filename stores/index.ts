/**
 * The document store: PostgreSQL, at DATABASE_URL (every node shares it), else the embedded PostgreSQL under DATA_DIR.
 */
import type { PlatformConfig } from "../runtime/config";
import type { DocumentStore } from "./types";
import { PgStore } from "./pg.store";

export * from "./types";
export { unitOfWork } from "./unit";
export { PgStore };

export type StoreConfig = Pick<PlatformConfig, "dataDir"> & Partial<Pick<PlatformConfig, "databaseUrl" | "databasePoolSize" | "docCacheSize">>;

/** One key per database: nodes (and stores) with the same key share documents and outbox. */
export const locationOf = (cfg: StoreConfig): string => `postgres:${cfg.databaseUrl ?? cfg.dataDir}`;

/** `name` is `service/collection` (or an internal name such as `_outbox`). */
export function createStore(cfg: StoreConfig, name: string, extraIndexes: string[] = []): DocumentStore {
	return new PgStore(cfg, name, extraIndexes);
}
