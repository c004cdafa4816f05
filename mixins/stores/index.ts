/**
 * Chooses the document store from the environment: MongoDB with MONGO_URI; PostgreSQL with DOCUMENT_STORE=postgres
 * (DATABASE_URL, else the embedded PostgreSQL); else NeDB files under DATA_DIR (the default).
 */
import path from "path";
import type { PlatformConfig } from "../../runtime/config";
import type { DocumentStore } from "./types";
import { NedbStore } from "./nedb.store";
import { PgStore } from "./pg.store";

export * from "./types";
export { unitOfWork } from "./unit";
export { NedbStore, PgStore };

export type StoreConfig = Pick<PlatformConfig, "dataDir" | "mongoUri"> & Partial<Pick<PlatformConfig, "documentStore" | "databaseUrl" | "databasePoolSize">>;

/** Whether documents (and so the outbox) live in PostgreSQL. */
export const onPostgres = (cfg: StoreConfig): boolean => !cfg.mongoUri && cfg.documentStore === "postgres";

/** One key per data location: nodes (and stores) with the same key share documents and outbox. */
export const locationOf = (cfg: StoreConfig): string => cfg.mongoUri ?? (onPostgres(cfg) ? `postgres:${cfg.databaseUrl ?? cfg.dataDir}` : cfg.dataDir);

/** `name` is `service/collection` (or an internal name such as `_outbox`). */
export function createStore(cfg: StoreConfig, name: string, extraIndexes: string[] = []): DocumentStore {
	// Loaded only when used: mongoose and its adapter take about a fifth of a node's start-up to load.
	if (cfg.mongoUri) return new (require("./mongo.store") as typeof import("./mongo.store")).MongoStore(cfg.mongoUri, name.replace("/", "_"), extraIndexes);
	if (onPostgres(cfg)) return new PgStore(cfg, name, extraIndexes);
	return new NedbStore(path.join(cfg.dataDir, `${name}.db`), extraIndexes);
}
