/**
 * NeDB document files in a DATA_DIR: what a platform that ran on NeDB (the default before PostgreSQL) left there. A
 * directory that holds them starts on NeDB when DOCUMENT_STORE is unset (runtime/config.ts), and `npm run migrate-store`
 * (tools/migrate-store.ts) copies them into PostgreSQL and moves them aside.
 */
import { existsSync, statSync } from "fs";
import path from "path";
import { DOMAINS } from "../catalog";

/**
 * The platform's own stores that are not collections of the catalog (events/, services/auth.service.ts,
 * workers/preserver.worker.ts), each `DATA_DIR/<name>.db` on NeDB. Consumer positions (`_stream_offsets`,
 * `_relay_offsets`) are not documents: a directory holding only those (a test's outbox hold) is no NeDB store.
 */
export const INTERNAL_STORES = ["_seed", "_outbox", "_audit_spool", "_mqtt_clients", "_stream_offsets", "_relay_offsets"] as const;
const DOCUMENT_INTERNALS = new Set(["_seed", "_outbox", "_audit_spool", "_mqtt_clients"]);

/** Every store name (`service/collection`, `_internal`) of the platform, in catalog order. */
export function storeNames(): string[] {
	return [...DOMAINS.flatMap((d) => d.collections.map((c) => `${d.name}/${c.name}`)), ...INTERNAL_STORES];
}

/** `DATA_DIR/<name>.db`: where NeDB keeps a store (mixins/stores/index.ts). */
export const nedbFileOf = (dataDir: string, name: string): string => path.join(dataDir, `${name}.db`);

/** The document stores of `dataDir` that have a non-empty NeDB file (`identity/users`, `_seed`...). */
export function nedbDocumentStores(dataDir: string): string[] {
	return storeNames().filter((n) => (n.includes("/") || DOCUMENT_INTERNALS.has(n)) && nonEmptyFile(nedbFileOf(dataDir, n)));
}

function nonEmptyFile(file: string): boolean {
	try {
		return existsSync(file) && statSync(file).isFile() && statSync(file).size > 0;
	} catch {
		return false;
	}
}
