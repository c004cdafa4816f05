/**
 * The durable outbox of change events: every write appends here, in the same store family as the documents, so
 * events survive a restart and consumers read them from a position (`seq`). The workers' stream reads from it.
 * The events commit in the same transaction as the documents, and positions follow commit order
 * (stores/pg.outbox.ts).
 */
import { EventEmitter } from "events";
import type { ChangeEvent } from "../lib/change-event";
import { locationOf, type DocumentStore, type StoreConfig } from "../stores";
import { PgOutbox } from "../stores/pg.outbox";
import { trackProgress } from "../runtime/health";
import { ChangeFeed } from "./feed";

/** The feed's entry in /status while it cannot read the outbox. */
export const FEED_STAGE = "change feed";

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
	/**
	 * NAMESPACE of the node that wrote it (absent in records of earlier versions): a relay publishes only its own
	 * namespace's records, so a node of another deployment on the same database republishes nothing of this one's.
	 */
	ns?: string;
}

export class Outbox extends EventEmitter {
	/** The transactional outbox table (stores/pg.outbox.ts). */
	private readonly pg: PgOutbox;
	private connecting?: Promise<void>;
	private users = 0;
	private connected = false;
	/** Stamped on every record appended here. */
	private readonly ns?: string;
	/**
	 * The process's one reader of this outbox (events/feed.ts), running while anyone waits for `readable`: the consumer
	 * groups, the relay, the search index and the live cursors read what it read, from memory.
	 */
	readonly feed: ChangeFeed<OutboxRecord>;

	constructor(cfg: StoreConfig & { namespace?: string }) {
		super();
		this.ns = cfg.namespace;
		this.pg = new PgOutbox(cfg);
		this.feed = new ChangeFeed<OutboxRecord>(
			{
				head: () => this.pg.head(),
				readFrom: (after, limit, deadlineMs) => this.readFrom(after, limit, deadlineMs).then((recs) => recs.map(deepFreeze)),
				listen: (onNotify, onLost) => this.pg.listen(onNotify, onLost),
			},
			{ track: () => trackProgress(cfg, FEED_STAGE) },
		);
		this.feed.on("readable", () => this.emit("readable"));
		this.on("newListener", (event) => {
			if (event === "readable" && this.connected) void this.feed.start().catch(() => undefined);
		});
		this.on("removeListener", (event) => {
			if (event === "readable" && !this.listenerCount("readable")) void this.feed.stop();
		});
	}

	/** Whether a write and its events commit together: always (one transaction on PostgreSQL). */
	get transactional(): boolean {
		return true;
	}

	/** The newest position: a reader starting from it misses nothing appended later (in commit order). */
	head(): Promise<number> {
		return this.pg.head();
	}

	connect(): Promise<void> {
		this.users++;
		this.connecting ??= this.pg.connect().then(() => {
			this.connected = true;
			if (this.listenerCount("readable")) void this.feed.start().catch(() => undefined);
		});
		return this.connecting;
	}

	async disconnect(): Promise<void> {
		if (--this.users > 0) return;
		await this.connecting;
		this.connecting = undefined;
		this.connected = false;
		await this.feed.stop();
		await this.pg.disconnect();
	}

	/** Positions follow commit order on the shared database, so nodes interleave in the order their writes committed. */
	async append(records: Omit<OutboxRecord, "seq">[]): Promise<OutboxRecord[]> {
		if (!records.length) return [];
		const ns = this.ns;
		const stamped = ns ? records.map((r) => ({ ...r, ns })) : records;
		const seqs = await this.pg.append(stamped);
		const out = stamped.map((r, i) => ({ ...r, seq: seqs[i] }) as OutboxRecord);
		this.appended(out);
		return out;
	}

	/** `appended` at once (with the records); the feed reads them once per burst and signals `readable`. */
	private appended(out: OutboxRecord[]): void {
		this.emit("appended", out);
		this.feed.signal();
	}

	/**
	 * For the readers that wait for `readable`: the records after `after`, from the feed's memory when it holds them
	 * (read-only: every reader shares them), else from the outbox. A reader caught up with the feed gets none until the
	 * feed has read further, which `readable` signals.
	 */
	async readFed(after: number, limit = 100): Promise<OutboxRecord[]> {
		return this.feed.read(after, limit) ?? this.readFrom(after, limit);
	}

	/** The records after `after` as the outbox holds them now. */
	async readFrom(after: number, limit = 100, deadlineMs?: number): Promise<OutboxRecord[]> {
		return (await this.pg.readFrom<Omit<OutboxRecord, "seq">>(after, limit, deadlineMs)).map(({ seq, rec }) => ({ ...rec, seq }) as OutboxRecord);
	}

	/** The last pass asked for: the next one starts after it. */
	private pruning: Promise<unknown> = Promise.resolve();

	/**
	 * Removes the records every consumer has passed (seq <= `passedAll`) and those older than `retentionHours`
	 * whoever still lags (docs/contracts.md "Limits the platform keeps": "The outbox keeps an event until every consumer group has passed it, then at
	 * most STREAM_RETENTION_HOURS"), passed records only after `graceMs` (the readers that are not consumer groups,
	 * each node's search index, tail the outbox). Returns how many were removed. One pass at a time: a call made during
	 * a pass runs its own, with its own bounds, after it (the relay's and the consumer groups' pruners may share one
	 * outbox).
	 */
	prune(passedAll: number, retentionHours: number, graceMs = PRUNE_GRACE_MS): Promise<number> {
		const pass = this.pruning.then(() => this.pg.prune(passedAll, retentionHours, graceMs));
		this.pruning = pass.catch(() => undefined);
		return pass;
	}

	count(): Promise<number> {
		return this.pg.count();
	}

	ping(): Promise<boolean> {
		return this.pg.ping();
	}
}

/** Freezes a record and everything in it: the feed hands the same objects to every reader of the process. */
function deepFreeze<T>(v: T): T {
	if (v && typeof v === "object" && !Object.isFrozen(v)) {
		Object.freeze(v);
		for (const k of Object.keys(v)) deepFreeze((v as Record<string, unknown>)[k]);
	}
	return v;
}

/** STREAM_RETENTION_HOURS default: the longest a consumer may stay behind before its events go. */
export const DEFAULT_RETENTION_HOURS = 168;

/** STREAM_POSITION_TTL_MS default: how long another namespace's position holds records back without being renewed. */
export const DEFAULT_POSITION_TTL_MS = 3_600_000;

/** How often a running consumer renews the heartbeat (`at`) of its stored position. */
export function heartbeatEvery(ttlMs = DEFAULT_POSITION_TTL_MS): number {
	return Math.max(250, Math.min(ttlMs / 4, 5 * 60_000));
}

/** A consumer's stored position: `seq`; since positions expire, also its heartbeat `at` (ms) and namespace `ns`. */
export interface StoredPosition {
	id: string;
	seq?: unknown;
	at?: unknown;
	ns?: unknown;
}

/** What a consumer stores as its position now: the position, the heartbeat, its namespace. */
export function positionDoc(seq: number, ns: string | undefined): { seq: number; at: number; ns?: string } {
	return ns ? { seq, at: Date.now(), ns } : { seq, at: Date.now() };
}

/**
 * The position every consumer that still counts has passed (0 when none does), for OutboxPruner. A position of this
 * namespace (or one that names none: an earlier version's) always counts: a consumer that is down keeps its records,
 * up to STREAM_RETENTION_HOURS. One of another namespace (a node started once with the wrong NAMESPACE on this
 * database) counts only while its consumer renews it within `ttlMs`; one without a heartbeat yet gets one now, so it
 * stops counting a TTL later unless renewed.
 */
export async function passedByLive(
	store: DocumentStore,
	ns: string | undefined,
	ttlMs: number,
	nsOf: (p: StoredPosition) => string | undefined = (p) => (typeof p.ns === "string" ? p.ns : undefined),
): Promise<number> {
	const now = Date.now();
	let min = Infinity;
	for (const p of (await store.find({ query: {} })) as StoredPosition[]) {
		const owner = nsOf(p);
		if (owner !== undefined && ns !== undefined && owner !== ns) {
			if (typeof p.at !== "number") await store.setOne(p.id, { at: now }).catch(() => undefined);
			else if (now - p.at > ttlMs) continue;
		}
		min = Math.min(min, Number(p.seq ?? 0));
	}
	return min === Infinity ? 0 : min;
}

const shared = new Map<string, Outbox>();

/**
 * One outbox per data location, namespace and process, shared by every domain service the process hosts (a database
 * several deployments may share gets one per namespace: each stamps its own on its records).
 */
export function sharedOutbox(cfg: StoreConfig & { namespace?: string }): Outbox {
	const key = `${locationOf(cfg)}#${cfg.namespace ?? ""}`;
	let o = shared.get(key);
	if (!o) shared.set(key, (o = new Outbox(cfg)));
	return o;
}

/** After a consumer moved, the pass waits this long (more moves meanwhile share it). */
const PRUNE_DELAY_MS = 1000;
/** Retention applies even when nothing moves (a consumer that is down). */
const PRUNE_EVERY_MS = 10 * 60 * 1000;

/**
 * Runs Outbox.prune for one kind of consumer: `passedAll` answers the position every consumer has passed (the
 * embedded stream: the lowest group position; the relay: the lowest relay position), 0 when there is none yet.
 */
/** How long a record every consumer group has passed is still kept by default (OUTBOX_GRACE_MS). */
export const PRUNE_GRACE_MS = 60_000;

export class OutboxPruner {
	private timer?: NodeJS.Timeout;
	private every?: NodeJS.Timeout;
	private running?: Promise<void>;
	private stopped = false;

	constructor(
		private readonly outbox: Outbox,
		private readonly passedAll: () => Promise<number>,
		private readonly retentionHours: number = DEFAULT_RETENTION_HOURS,
		private readonly graceMs: number = PRUNE_GRACE_MS,
	) {}

	start(): void {
		this.stopped = false;
		this.every ??= setInterval(() => this.schedule(0), PRUNE_EVERY_MS).unref();
		this.schedule(PRUNE_DELAY_MS);
	}

	/** Asks for a pass soon (a consumer moved). */
	schedule(delay = PRUNE_DELAY_MS): void {
		if (this.timer || this.stopped) return;
		this.timer = setTimeout(() => {
			this.timer = undefined;
			void this.runOnce();
		}, delay);
		this.timer.unref();
	}

	/** One pass now; failures wait for the next one (pruning is never urgent). */
	runOnce(): Promise<void> {
		this.running ??= (async () => {
			try {
				await this.outbox.prune(await this.passedAll(), this.retentionHours, this.graceMs);
			} catch {
				/* the next pass retries */
			} finally {
				this.running = undefined;
			}
		})();
		return this.running;
	}

	async stop(): Promise<void> {
		this.stopped = true;
		if (this.timer) clearTimeout(this.timer);
		if (this.every) clearInterval(this.every);
		this.timer = this.every = undefined;
		await this.running;
	}
}
