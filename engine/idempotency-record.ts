/**
 * Idempotency-Key records (docs/contracts.md "Retries and concurrent writers"), shared by the gateway that claims a key and
 * keeps its answer (services/api/idempotency.ts), the domains whose writes mark it committed (`fenceWrite`, called by
 * the collection engine right before a write's change events are appended) and the cleaner.
 *
 * One record per principal and key, in the document store (`_idempotency`), so every gateway and domain node sees
 * it and it outlives restarts:
 * `{ id: hash(principal, key), fp, pre?, action, state: running | committed | done, attempt, lease, node, inst, at, by?,
 * ref?, status?, body? | digest?, headers?, once? }`.
 *
 * `attempt` is a fencing token: the gateway that runs the request draws it and passes it to the domain in
 * `ctx.meta.idempotency`. The domain's write moves the record from `running` to `committed` only under that attempt;
 * another attempt (a retry that took over after the first one's gateway answered 5xx or its lease ran out) refuses
 * the write with 409. On PostgreSQL that update runs in the write's own transaction (the unit of work, before the
 * outbox append commits it), with a row lock: of two attempts exactly one commits, and a node that dies after its
 * commit leaves a committed record, which a retry turns into an answer.
 */
import { conflict } from "../lib/errors";
import { createStore, locationOf, type DocumentStore, type StoreConfig } from "../stores";

export const IDEMPOTENCY_STORE = "_idempotency";
/** How long a kept answer (and the key) lives. */
export const IDEMPOTENCY_TTL_MS = 24 * 3_600_000;
export const IN_PROGRESS = "a request with this idempotency key is in progress";
export const KEY_REUSED = "idempotency key was used for another request";
/**
 * `ctx.meta[SHOWN_ONCE]`: the answer holds a value shown only once (a client's secret, an APT, a share key). Set by
 * the action that returns it; it travels back to the gateway with the call's meta, which replays such a kept answer
 * only to the session that made the request (services/api/idempotency.ts).
 */
export const SHOWN_ONCE = "$shownOnce";

/** Marks the call's answer as holding a value shown once (see SHOWN_ONCE). */
export function markShownOnce(ctx: { meta: Record<string, unknown> }): void {
	ctx.meta[SHOWN_ONCE] = true;
}

export type IdemState = "running" | "committed" | "done";

/** What the gateway passes to the domain in `ctx.meta.idempotency`. */
export interface IdemMeta {
	/** The record's id. */
	id: string;
	/** The fencing token of this run. */
	attempt: string;
	/** `service/collection` of the routed action: only its writes name the record's `ref` (what a rebuilt answer re-reads). */
	col: string;
}

export interface IdemRecord {
	[field: string]: unknown;
	id: string;
	/** The request's fingerprint; of a streamed request (an upload), `pre` until its body has been read to its end. */
	fp: string;
	/** A streamed request's provisional fingerprint (method, path, query), known before its body is read. */
	pre?: string;
	action: string;
	state: IdemState;
	attempt: string;
	/**
	 * Epoch ms until which a `running` (or `committed`, answer not yet kept) record belongs to its gateway: a heartbeat
	 * timeout ahead, renewed while the request runs.
	 */
	lease: number;
	/** The gateway holding the lease: its node id and its broker's instance id (a restarted node is another instance). */
	node?: string;
	inst?: string;
	/** Epoch ms of the first claim: the 24 hours count from here. */
	at: number;
	/** A digest of the session whose token runs (ran) the request. */
	by?: string;
	/**
	 * The documents the routed collection wrote first: `{ ids }` (create: the new document; bulk create: all; an
	 * upload: the first file, then all of them once its answer is kept).
	 */
	ref?: { ids: string[] };
	status?: number;
	/** The kept body as JSON text (at most MAX_KEPT_BODY bytes); over that, only its `digest`. */
	body?: string;
	digest?: string;
	/** Response headers of the answer that a replay repeats (JSON text). */
	headers?: string;
	/** The kept answer holds a value shown once (SHOWN_ONCE): replayed as kept only to the session `by`. */
	once?: boolean;
}

const stores = new Map<string, { store: DocumentStore; ready: Promise<void>; users: number }>();

/**
 * A service's use of the `_idempotency` store of its data location: one store per location and process, connected on first use, disconnected when its last user releases it (a restarted platform reads
 * the records again from the store).
 */
export class IdempotencyStoreRef {
	private opened?: Promise<DocumentStore>;

	constructor(private readonly cfg: StoreConfig) {}

	get(): Promise<DocumentStore> {
		return (this.opened ??= (async () => {
			const key = locationOf(this.cfg);
			let s = stores.get(key);
			if (!s) {
				const store = createStore(this.cfg, IDEMPOTENCY_STORE, ["at"]);
				stores.set(key, (s = { store, ready: store.connect(), users: 0 }));
			}
			s.users++;
			try {
				await s.ready;
			} catch (err) {
				if (stores.get(key) === s) stores.delete(key);
				this.opened = undefined;
				throw err;
			}
			return s.store;
		})());
	}

	async release(): Promise<void> {
		const opened = this.opened;
		this.opened = undefined;
		if (
			!opened ||
			!(await opened.then(
				() => true,
				() => false,
			))
		)
			return;
		const key = locationOf(this.cfg);
		const s = stores.get(key);
		if (!s || --s.users > 0) return;
		stores.delete(key);
		await s.store.disconnect();
	}
}

/**
 * Marks the request's key committed under its attempt, in the caller's unit of work (so on PostgreSQL with the write
 * it precedes); 409 when another attempt owns the key. `ids` are the routed collection's written documents, kept as
 * the record's `ref` the first time.
 */
export async function fenceWrite(store: DocumentStore, meta: IdemMeta, col: string, ids: string[]): Promise<void> {
	const mine = meta.col === col && ids.length > 0;
	const query: Record<string, unknown> = { id: meta.id, attempt: meta.attempt, state: { $in: ["running", "committed"] } };
	if (mine) query.ref = { $exists: false };
	const set: Record<string, unknown> = { state: "committed" };
	if (mine) set.ref = { ids };
	if (await store.updateIf(query, { $set: set })) return;
	const cur = (await store.findOne({ id: meta.id })) as IdemRecord | null;
	// No record in this store (a node whose documents live apart from the gateway's records): nothing to fence.
	if (!cur || cur.attempt === meta.attempt) return;
	throw conflict(IN_PROGRESS);
}

/** Whether `meta` is a well-formed IdemMeta (it crosses the transporter from the gateway). */
export function idemMetaOf(meta: unknown): IdemMeta | undefined {
	const m = meta as Partial<IdemMeta> | undefined;
	return m && typeof m.id === "string" && typeof m.attempt === "string" && typeof m.col === "string" ? (m as IdemMeta) : undefined;
}

/**
 * The collection engine's hook, right before a write's change events are appended: fences the write when the request
 * carries a key (`ctx.meta.idempotency`), once per action call (its later batches and hooks are the same request).
 */
export async function fenceChanges(ctx: { meta?: unknown; locals?: Record<string, unknown> }, records: IdempotencyStoreRef, col: string, ids: string[]): Promise<void> {
	const meta = idemMetaOf((ctx.meta as { idempotency?: unknown } | undefined)?.idempotency);
	if (!meta || ctx.locals?.idempotencyFenced) return;
	await fenceWrite(await records.get(), meta, col, ids);
	if (ctx.locals) ctx.locals.idempotencyFenced = true;
}

/** The cleaner's purge: records older than the TTL (their kept answers with them). */
export async function purgeIdempotency(records: IdempotencyStoreRef, now = Date.now()): Promise<number> {
	return (await records.get()).removeMany({ at: { $lt: now - IDEMPOTENCY_TTL_MS } });
}
