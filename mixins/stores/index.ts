/** Chooses the document store from the environment: MongoDB with MONGO_URI, else NeDB files under DATA_DIR. */
import path from "path";
import type { PlatformConfig } from "../../lib/config";
import type { DocumentStore } from "./types";
import { NedbStore } from "./nedb.store";
import { MongoStore } from "./mongo.store";

export * from "./types";
export { NedbStore, MongoStore };

/** `name` is `service/collection` (or an internal name such as `_outbox`). */
export function createStore(cfg: Pick<PlatformConfig, "dataDir" | "mongoUri">, name: string, extraIndexes: string[] = []): DocumentStore {
	if (cfg.mongoUri) return new MongoStore(cfg.mongoUri, name.replace("/", "_"), extraIndexes);
	return new NedbStore(path.join(cfg.dataDir, `${name}.db`), extraIndexes);
}
