/**
 * The embedded path of request audit entries (EVENT_STREAM=outbox): batches of entries kept as documents
 * (`_audit_spool`) in the same database as the outbox, i.e. next to it. Gateways append; the logger takes batches, stores their rows, then removes them.
 * A logger killed between its insert and the removal takes the same batch again: its insert is idempotent by request
 * id. So, like the outbox, the spool reaches the logger only where the logger reads the same store location.
 */
import { EventEmitter } from "events";
import type { AuditRequest } from "../lib/audit";
import { storableJson } from "../runtime/relational";
import { createStore, isDuplicateKeyError, locationOf, type DocumentStore, type StoreConfig } from "../stores";

export interface AuditBatch {
	/** Unique per batch: the spool's document id, JetStream's de-duplication key. */
	id: string;
	entries: AuditRequest[];
}

export class AuditSpool extends EventEmitter {
	private store: DocumentStore;
	private connecting?: Promise<void>;
	private users = 0;
	private garbage = 0;

	constructor(cfg: StoreConfig) {
		super();
		this.store = createStore(cfg, "_audit_spool");
	}

	connect(): Promise<void> {
		this.users++;
		return this.open();
	}

	/** Connects once; a failed attempt is made again by the next use (the store may come back). */
	private open(): Promise<void> {
		this.connecting ??= this.store.connect().catch((err) => {
			this.connecting = undefined;
			throw err;
		});
		return this.connecting;
	}

	async disconnect(): Promise<void> {
		if (--this.users > 0) return;
		const was = this.connecting;
		this.connecting = undefined;
		if (
			was &&
			(await was.then(
				() => true,
				() => false,
			))
		)
			await this.store.disconnect();
	}

	/** Stores a batch; a batch stored already (a retry after a lost answer) counts as stored. */
	async append(batch: AuditBatch): Promise<void> {
		await this.open();
		// PostgreSQL's jsonb refuses NUL and lone surrogates: cleaned here as the logger would clean its columns.
		try {
			await this.store.insert({ id: batch.id, entries: storableJson(batch.entries) });
		} catch (err) {
			if (!isDuplicateKeyError(err)) throw err;
		}
		this.emit("appended");
	}

	/** Up to `limit` stored batches, any order (audit rows carry their own time). */
	async take(limit: number): Promise<AuditBatch[]> {
		await this.open();
		const docs = await this.store.find({ query: {}, limit });
		return docs.map((d) => ({ id: d.id, entries: Array.isArray(d.entries) ? (d.entries as AuditRequest[]) : [] }));
	}

	async remove(ids: string[]): Promise<void> {
		if (!ids.length) return;
		await this.store.removeMany({ id: { $in: ids } });
	}

	count(): Promise<number> {
		return this.store.count({});
	}
}

const shared = new Map<string, AuditSpool>();

/** One spool per data location and process, shared by the gateway and the logger a process hosts. */
export function sharedAuditSpool(cfg: StoreConfig): AuditSpool {
	const key = locationOf(cfg);
	let s = shared.get(key);
	if (!s) shared.set(key, (s = new AuditSpool(cfg)));
	return s;
}
