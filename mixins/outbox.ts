/**
 * The durable outbox of change events: every write appends here, in the same store family as the documents, so
 * events survive a restart and consumers read them from a position (`seq`). The workers' stream reads from it.
 */
import { EventEmitter } from "events";
import type { PlatformConfig } from "../lib/config";
import type { ChangeEvent } from "../lib/change-event";
import { objectId } from "../lib/crypto";
import { createStore, type DocumentStore } from "./stores";

/** Who caused a change: for audit and per-client routing, never part of the webhook payload itself. */
export interface ChangeActor {
	uid?: string;
	aid?: string;
	cid?: string;
	session?: string;
	ip?: string;
}

export interface OutboxRecord {
	seq: number;
	event: ChangeEvent;
	/** The document's `clients` (after the change, else before): the webhook fan-out list. */
	clients: string[];
	owner?: string;
	shares?: string[];
	actor: ChangeActor;
}

export class Outbox extends EventEmitter {
	private store: DocumentStore;
	private seq = 0;
	private connecting?: Promise<void>;
	private users = 0;

	constructor(cfg: Pick<PlatformConfig, "dataDir" | "mongoUri">) {
		super();
		this.store = createStore(cfg, "_outbox", ["seq"]);
	}

	connect(): Promise<void> {
		this.users++;
		this.connecting ??= (async () => {
			await this.store.connect();
			const [last] = await this.store.find({ query: {}, sort: { seq: -1 }, limit: 1 });
			this.seq = Math.max(Number(last?.seq ?? 0), Date.now() * 1000);
		})();
		return this.connecting;
	}

	async disconnect(): Promise<void> {
		if (--this.users > 0) return;
		await this.connecting;
		this.connecting = undefined;
		await this.store.disconnect();
	}

	/**
	 * Positions are microsecond-scaled timestamps, strictly increasing within a process, so nodes that share one
	 * production store interleave in time order.
	 */
	async append(records: Omit<OutboxRecord, "seq">[]): Promise<OutboxRecord[]> {
		if (!records.length) return [];
		const stored = records.map((r) => ({ _id: objectId(), ...r, seq: (this.seq = Math.max(this.seq + 1, Date.now() * 1000)) }));
		await this.store.insertMany(stored);
		const out = stored.map(({ _id, ...r }) => r as OutboxRecord);
		this.emit("appended", out);
		return out;
	}

	async readFrom(after: number, limit = 100): Promise<OutboxRecord[]> {
		const docs = await this.store.find({ query: { seq: { $gt: after } }, sort: { seq: 1 }, limit });
		return docs.map(({ _id, ...r }) => r as unknown as OutboxRecord);
	}

	ping(): Promise<boolean> {
		return this.store.ping();
	}
}

const shared = new Map<string, Outbox>();

/** One outbox per data location and process, shared by every domain service the process hosts. */
export function sharedOutbox(cfg: Pick<PlatformConfig, "dataDir" | "mongoUri">): Outbox {
	const key = cfg.mongoUri ?? cfg.dataDir;
	let o = shared.get(key);
	if (!o) shared.set(key, (o = new Outbox(cfg)));
	return o;
}
