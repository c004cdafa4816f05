/** The names of the platform's document stores (each a table `docs/<name>`, stores/pg.store.ts). */
import { DOMAINS } from "../catalog";

/**
 * The platform's own stores that are not collections of the catalog (events/, services/auth.service.ts,
 * workers/preserver.worker.ts). Consumer positions (`_stream_offsets`, `_relay_offsets`) are not documents.
 */
export const INTERNAL_STORES = ["_seed", "_outbox", "_audit_spool", "_mqtt_clients", "_stream_offsets", "_relay_offsets"] as const;
export const DOCUMENT_INTERNALS: ReadonlySet<string> = new Set(["_seed", "_outbox", "_audit_spool", "_mqtt_clients"]);

/** Every store name (`service/collection`, `_internal`) of the platform, in catalog order. */
export function storeNames(): string[] {
	return [...DOMAINS.flatMap((d) => d.collections.map((c) => `${d.name}/${c.name}`)), ...INTERNAL_STORES];
}
