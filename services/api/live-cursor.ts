/**
 * Live cursors (`GET /{service}/{collection}/cursor?live=true`): after the cursor's matches, one `event: live` frame,
 * then one `event: change` frame per change of the caller's view, read from the durable change stream (the outbox),
 * in commit order.
 *
 * - The feed: each gateway reads the outbox after its position (woken by this process's appends, and reading a shared
 *   store every LIVE_POLL_MS, so changes written through any node arrive) and keeps the newest LIVE_RING records for
 *   resumption. A position is a record's `seq`, sent as an opaque `L<base 36>`.
 * - Who a change can concern: subscribers are indexed by zone keys (own and share: `u:<identity>`; group:
 *   `g:<tenant>/<group>`; client: `c:<client>`). A change looks up the keys of its document before and after, so
 *   its cost grows with the subscribers it can concern, not with all of them.
 * - Exactness: for each of those, the caller's view is decided again with the authority layer's own code
 *   (middlewares/authority.ts: scope, grant with its time and location, `enforce` with zones, row filter, `query` and
 *   `projection`), from the grant index of the moment; the document before and after the change is matched against
 *   the view's filter with the store's matcher (the one that checks a write's grant rows), and presented as a GET
 *   presents it (lib/present.ts with the view's field list). A document in neither image of the view is never named.
 * - Token validity: every LIVE_SWEEP_MS (and at once after a revocation broadcast) each stream's bearer is
 *   authenticated again as a request would be; a refusal ends the stream with its 401 frame.
 */
import type { IncomingMessage, ServerResponse } from "http";
import { performance } from "perf_hooks";
import type { ServiceBroker } from "moleculer";
import { findCollection, type CollectionDef } from "../../catalog";
import { checkGrant, checkScope, enforce } from "../../middlewares/authority";
import { grantCache } from "../../middlewares/grant-cache";
import type { CollectionActionMeta, Ctx } from "../../mixins/collection.mixin";
import { matchesFilter } from "../../mixins/stores/nedb.store";
import { createStore, onPostgres, type DocumentStore, type StoreConfig } from "../../mixins/stores";
import { sharedOutbox, type Outbox, type OutboxRecord } from "../../events/outbox";
import { ApiError, toErrorBody } from "../../lib/errors";
import type { GrantIndex, Grant } from "../../lib/grants";
import type { AccessPlan } from "../../lib/plan";
import { present } from "../../lib/present";
import { parseZones } from "../../lib/query-safety";
import { identityOf, type Doc, type TokenClaims } from "../../lib/types";
import type { Authenticator } from "../../middlewares/authenticate";

/** Records kept in memory for resumption (Last-Event-ID) on this gateway; older positions are read from the outbox. */
export const LIVE_RING = 20_000;
/** How often a gateway reads a shared store's outbox for changes written through other nodes. */
export const LIVE_POLL_MS = 50;
/** How often each stream's token is checked again (revocation, logout, deactivation, expiry: 401 within 2 s). */
export const LIVE_SWEEP_MS = 1000;
/** A comment line at least this often (CONTRACTS: at least every 15 s). */
export const KEEP_ALIVE_MS = 14_000;
/** A client that reads less than its changes: past this much unsent data its stream is cut (it resumes by position). */
export const MAX_BUFFERED = 4 * 1024 * 1024;
const READ_BATCH = 500;
/**
 * The longest the feed decides records in one go before it lets the event loop turn (sockets flush, requests and
 * other streams are served): a burst of commits read as one batch of hundreds of records, each written to many
 * streams, would otherwise hold the loop for hundreds of milliseconds (docs/benchmarks.md, "Live cursors").
 */
export const LIVE_SLICE_MS = 8;
/** How often a gateway renews its hold on the outbox's pruning (the hold counts while renewed: STREAM_POSITION_TTL_MS). */
const HOLD_EVERY_MS = 30_000;

const POSITION = /^L[0-9a-z]{1,12}$/;
export const positionText = (seq: number): string => `L${seq.toString(36)}`;
/** The record position of a `Last-Event-ID`, or undefined when it is none of ours (a document id of the listing). */
export function positionOf(text: string): number | undefined {
	return POSITION.test(text) ? parseInt(text.slice(1), 36) : undefined;
}

/** `live` query parameter: absent or `false` → no, `true` → yes, anything else 400. */
export function liveRequested(query: Record<string, unknown> | undefined): boolean {
	const v = query?.live;
	if (v === undefined || v === "false" || v === false) return false;
	if (v === "true" || v === true) return true;
	throw new ApiError(400, "live must be true or false");
}

interface ReqLike {
	headers: IncomingMessage["headers"];
	query?: Record<string, unknown>;
	socket?: { remoteAddress?: string };
}

/** A document image of a change, in stored form (`_id`), as the filter matcher and `present` take it. */
type Image = Record<string, unknown> & { _id: string };

interface Sub {
	res: ServerResponse;
	req: ReqLike;
	token: TokenClaims;
	topic: string;
	col: CollectionDef;
	meta: CollectionActionMeta;
	query: Record<string, unknown>;
	headers: Record<string, string>;
	ip?: string;
	keys: string[];
	/** The last position decided for this stream. */
	pos: number;
	/** Caught up with the hub: in the index, fed as records arrive. */
	live: boolean;
	closed: boolean;
	/** The view of the last decision, reused while the grant index and the applicable grants are the same. */
	view?: { index: GrantIndex; policies: Grant[]; plan: AccessPlan };
	/** The record being decided (a subscriber under several keys of one change is decided once). */
	mark: number;
	/** Its response is corked: the frames written in this turn of the loop go out in one write. */
	corked?: boolean;
}

/** What streamCursor gets back from `prepare`: where the changes start, and whether the listing is skipped. */
export interface LiveStart {
	/** Resuming from a position: no listing, the changes after it. */
	resumes: boolean;
	/** Writes `event: live` and feeds the stream's changes from then on (the response stays open). */
	attach(res: ServerResponse): void;
}

/** Zone keys of a document image: who can have it in view (a superset: the view decides). */
function docKeys(d: Record<string, unknown> | undefined, into: Set<string>): void {
	if (!d) return;
	if (typeof d.owner === "string") into.add(`u:${d.owner}`);
	if (Array.isArray(d.shares)) for (const s of d.shares) if (typeof s === "string") into.add(`u:${s}`);
	const clients = Array.isArray(d.clients) ? d.clients.filter((c): c is string => typeof c === "string") : [];
	for (const c of clients) into.add(`c:${c}`);
	if (clients.length && Array.isArray(d.groups)) for (const g of d.groups) if (typeof g === "string") into.add(`g:${clients[0]}/${g}`);
}

/** Zone keys of a subscriber: the zones its view is made of (lib/zones.ts zoneFilter, in index form). */
function subKeys(zones: string[], token: TokenClaims): string[] {
	const keys = new Set<string>();
	for (const z of zones) {
		if (z === "own" || z === "share") keys.add(`u:${identityOf(token)}`);
		else if (z === "client" && token.cid) keys.add(`c:${token.cid}`);
		else if (z === "group" && token.cid) for (const g of token.groups ?? []) keys.add(`g:${token.cid}/${g}`);
	}
	return [...keys];
}

const imageOf = (d: Doc | undefined): Image | undefined => (d ? ({ ...d, _id: d.id as string } as Image) : undefined);
const samePolicies = (a: Grant[], b: Grant[]) => a.length === b.length && a.every((g, i) => g === b[i]);

export class LiveCursors {
	private readonly outbox: Outbox;
	/** Subscribers by topic (`service.collection`), then zone key. */
	private readonly index = new Map<string, Map<string, Set<Sub>>>();
	private readonly subs = new Set<Sub>();
	/** The newest records, in seq order; every record after `floor` up to `position` is here. */
	private ring: OutboxRecord[] = [];
	private floor = 0;
	private position = 0;
	private started?: Promise<void>;
	private stopped = false;
	private wake?: () => void;
	private timers: NodeJS.Timeout[] = [];
	/** Set by the outbox's `readable` (appends of this process); a sleep that finds it set returns at once. */
	private signalled = false;
	private readonly onReadable = () => {
		this.signalled = true;
		this.wake?.();
	};
	/** A shared store (another node's writes are in it): read it every LIVE_POLL_MS; alone, appends signal. */
	private readonly pollMs: number;

	constructor(
		private readonly broker: ServiceBroker,
		private readonly cfg: StoreConfig & { namespace?: string; eventStream?: string; nodeID?: string },
		private readonly authenticator: Pick<Authenticator, "authenticate">,
		private readonly logger: { warn(...a: unknown[]): void },
	) {
		this.outbox = sharedOutbox(cfg);
		this.pollMs = this.sharedStore ? LIVE_POLL_MS : 1000;
	}

	/** Documents and outbox in a store other nodes share (PostgreSQL at DATABASE_URL, MongoDB). */
	private get sharedStore(): boolean {
		return !!this.cfg.mongoUri || (onPostgres(this.cfg) && !!(this.cfg as { databaseUrl?: string }).databaseUrl);
	}

	/** Open live streams on this gateway (metrics, bench). */
	get size(): number {
		return this.subs.size;
	}

	/**
	 * Validates a live request before any header leaves (400 for a bad `live`, position or query, 403 like the
	 * cursor, 501 when this gateway cannot read the change stream) and takes the position its changes start from:
	 * the outbox's head before the listing, or the position of `Last-Event-ID` / `?last_event_id=`. Undefined when
	 * the request is not live.
	 */
	async prepare(req: ReqLike & { $ctx: { meta: any } }, action: string, params: { query?: Record<string, unknown> }): Promise<LiveStart | undefined> {
		const query = (params.query ?? {}) as Record<string, unknown>;
		if (!liveRequested(query)) return undefined;
		const [service, ...rest] = action.split(".");
		const collection = rest.slice(0, -1).join(".");
		const ref = findCollection(service, collection);
		if (!ref) throw new ApiError(404, "not found");
		if (!this.sharedStore && !this.broker.getLocalService(service))
			throw new ApiError(501, "live cursors need the change stream on this gateway: run it with the domain services, or on a shared document store (DATABASE_URL or MONGO_URI)");
		await this.start();
		const meta = req.$ctx.meta;
		const token = meta.token as TokenClaims;
		const sub: Sub = {
			res: undefined as unknown as ServerResponse,
			req: { headers: req.headers, query: req.query, socket: { remoteAddress: req.socket?.remoteAddress } },
			token,
			topic: `${service}.${collection}`,
			col: ref.collection,
			meta: { service, collection, op: "cursor", level: "read" },
			query,
			headers: meta.headers ?? {},
			ip: meta.ip,
			keys: subKeys(parseZones(query.zone ?? meta.headers?.["x-zone"]), token),
			pos: 0,
			live: false,
			closed: false,
			mark: -1,
		};
		// The view as the authority layer makes it: a refusal (scope, grant, a bad or hidden query field) answers now.
		this.viewOf(sub, await grantCache.get(this.broker));
		const raw = req.headers["last-event-id"] ?? query.last_event_id;
		const text = raw === undefined ? "" : String(Array.isArray(raw) ? raw[0] : raw).trim();
		const resume = text ? positionOf(text) : undefined;
		if (resume !== undefined) {
			sub.pos = resume;
			const kept = await this.kept(resume);
			return {
				resumes: true,
				attach: (res) => (kept ? this.attach(sub, res, false) : this.end(Object.assign(sub, { res }), new ApiError(410, `Last-Event-ID ${text} is older than this stream's retention; reconnect without it to start over`))),
			};
		}
		sub.pos = await this.outbox.head();
		return { resumes: false, attach: (res) => this.attach(sub, res, true) };
	}

	/** Whether every record after `seq` can still be read: in memory, or `seq` itself still in the outbox. */
	private async kept(seq: number): Promise<boolean> {
		if (seq >= this.floor && seq <= this.position) return true;
		const [rec] = await this.outbox.readFrom(seq - 1, 1);
		return rec?.seq === seq;
	}

	private attach(sub: Sub, res: ServerResponse, announce: boolean): void {
		sub.res = res;
		if (res.destroyed || res.writableEnded) return;
		this.subs.add(sub);
		res.once("close", () => this.drop(sub));
		if (announce) this.write(sub, `id: ${positionText(sub.pos)}\nevent: live\ndata: {}\n\n`);
		void this.catchUp(sub);
	}

	/** Feeds a stream the records between its position and the hub's, then puts it in the index. */
	private async catchUp(sub: Sub): Promise<void> {
		try {
			while (!sub.closed) {
				if (sub.pos >= this.position) {
					this.join(sub);
					return;
				}
				const recs = sub.pos >= this.floor ? this.ringAfter(sub.pos) : await this.outbox.readFrom(sub.pos, READ_BATCH);
				if (!recs.length) {
					this.join(sub);
					return;
				}
				const index = await grantCache.get(this.broker);
				for (const rec of recs) if (!sub.closed && rec.seq > sub.pos) this.deliver(sub, rec, index, imageOf(rec.event.before), imageOf(rec.event.after));
			}
		} catch (err) {
			this.end(sub, err);
		}
	}

	private join(sub: Sub): void {
		if (sub.closed || sub.live) return;
		sub.live = true;
		let byKey = this.index.get(sub.topic);
		if (!byKey) this.index.set(sub.topic, (byKey = new Map()));
		for (const k of sub.keys) {
			let set = byKey.get(k);
			if (!set) byKey.set(k, (set = new Set()));
			set.add(sub);
		}
	}

	private drop(sub: Sub): void {
		sub.closed = true;
		this.subs.delete(sub);
		if (!sub.live) return;
		const byKey = this.index.get(sub.topic);
		for (const k of sub.keys) {
			const set = byKey?.get(k);
			set?.delete(sub);
			if (set && !set.size) byKey!.delete(k);
		}
		if (byKey && !byKey.size) this.index.delete(sub.topic);
	}

	private ringAfter(seq: number): OutboxRecord[] {
		let lo = 0;
		let hi = this.ring.length;
		while (lo < hi) {
			const mid = (lo + hi) >>> 1;
			if (this.ring[mid].seq <= seq) lo = mid + 1;
			else hi = mid;
		}
		return this.ring.slice(lo, lo + READ_BATCH);
	}

	/** The caller's view of the collection now (throws the authority layer's refusal). */
	private viewOf(sub: Sub, index: GrantIndex): AccessPlan {
		const { token, meta } = sub;
		checkScope(token, meta.level, meta.service, meta.collection);
		const decision = checkGrant(index, token, meta.level, `${meta.service}:${meta.collection}`, sub.ip);
		const v = sub.view;
		if (v && v.index === index && samePolicies(v.policies, decision.policies)) return v.plan;
		const ctx = { params: { query: sub.query }, meta: { headers: sub.headers, ip: sub.ip } } as unknown as Ctx;
		const plan = enforce(ctx, index, sub.col, meta, decision, token);
		sub.view = { index, policies: decision.policies, plan };
		return plan;
	}

	/** Decides one change for one stream and writes its frame, if the change touches the view. */
	private deliver(sub: Sub, rec: OutboxRecord, index: GrantIndex, before: Image | undefined, after: Image | undefined): void {
		sub.pos = rec.seq;
		let plan: AccessPlan;
		let was: boolean;
		let is: boolean;
		try {
			plan = this.viewOf(sub, index);
			was = !!before && matchesFilter(before, plan.filter);
			is = !!after && matchesFilter(after, plan.filter);
		} catch {
			// No read grant (or scope) any more: nothing of the collection is in view.
			return;
		}
		if (!was && !is) return;
		const op = is ? (was ? "update" : "enter") : "leave";
		const frame: Record<string, unknown> = { op, id: rec.event.id };
		if (is) frame.data = present(sub.col, after!, plan.fields);
		this.write(sub, `id: ${positionText(rec.seq)}\nevent: change\ndata: ${JSON.stringify(frame)}\n\n`);
	}

	/** One record for every live stream it can concern (the zone keys of its document before and after). */
	private dispatch(rec: OutboxRecord, index: GrantIndex): void {
		const byKey = this.index.get(rec.event.topic);
		if (!byKey) return;
		const keys = new Set<string>();
		docKeys(rec.event.before, keys);
		docKeys(rec.event.after, keys);
		let before: Image | undefined;
		let after: Image | undefined;
		let imaged = false;
		for (const k of keys) {
			const set = byKey.get(k);
			if (!set) continue;
			for (const sub of set) {
				if (sub.mark === rec.seq || rec.seq <= sub.pos) continue;
				sub.mark = rec.seq;
				if (!imaged) {
					before = imageOf(rec.event.before);
					after = imageOf(rec.event.after);
					imaged = true;
				}
				this.deliver(sub, rec, index, before, after);
			}
		}
	}

	/** The streams corked in this turn of the loop (see write). */
	private corked: Sub[] = [];

	/**
	 * A frame for one stream. The response is corked at its first frame of the loop's turn and uncorked once the turn's
	 * synchronous work is done: the frames one slice of records owes a stream leave in one socket write, not one each.
	 */
	private write(sub: Sub, text: string): void {
		if (sub.closed) return;
		if (!sub.corked) {
			sub.corked = true;
			sub.res.cork();
			if (!this.corked.length) process.nextTick(this.uncork);
			this.corked.push(sub);
		}
		sub.res.write(text);
		if (sub.res.writableLength > MAX_BUFFERED) sub.res.destroy();
	}

	/** `event: error` with the error's body, then the end of the stream. */
	private end(sub: Sub, err: unknown): void {
		if (sub.closed) return;
		const res = sub.res;
		this.drop(sub);
		if (!res || res.writableEnded) return;
		res.end(`event: error\ndata: ${JSON.stringify(toErrorBody(err))}\n\n`);
	}

	private start(): Promise<void> {
		this.started ??= (async () => {
			await this.outbox.connect();
			this.position = this.floor = this.held = await this.outbox.head();
			this.outbox.on("readable", this.onReadable);
			void this.run();
			this.timers.push(setInterval(() => void this.sweep(), LIVE_SWEEP_MS));
			this.timers.push(setInterval(() => this.keepAlive(), KEEP_ALIVE_MS));
			if (this.sharedStore) await this.hold();
			for (const t of this.timers) t.unref();
		})();
		return this.started;
	}

	/**
	 * Keeps the outbox's pruner from removing what this gateway's clients may resume from (after its restart too): a
	 * consumer position at the oldest record of its memory, in the store the pruner reads (the embedded stream's
	 * `_stream_offsets`, the relay's `_relay_offsets`). It names a namespace of its own (`<NAMESPACE>.live`), so it
	 * counts only while renewed (STREAM_POSITION_TTL_MS): a gateway gone for good holds nothing after that.
	 */
	private async hold(): Promise<void> {
		const store: DocumentStore = createStore(this.cfg, this.cfg.eventStream && this.cfg.eventStream !== "outbox" ? "_relay_offsets" : "_stream_offsets");
		await store.connect();
		const id = `live-cursors:${this.broker.nodeID}`;
		// A restarted gateway keeps the hold of its previous run until its memory has turned over once.
		const before = Number((await store.findOne({ id }).catch(() => null))?.seq);
		if (Number.isFinite(before) && before < this.held) this.held = before;
		const save = async () => {
			const doc = { seq: this.held, at: Date.now(), ns: `${this.cfg.namespace ?? ""}.live` };
			if (!(await store.setOne(id, doc))) await store.insert({ _id: id, ...doc });
		};
		await save().catch((err) => this.logger.warn("live cursors: holding the outbox failed", (err as Error)?.message));
		this.timers.push(setInterval(() => void save().catch(() => undefined), HOLD_EVERY_MS));
		this.closers.push(() => store.disconnect());
	}

	private closers: Array<() => Promise<void>> = [];
	/** The position the outbox keeps records after, for resumption (see hold). */
	private held = Infinity;

	/** The feed: the records after the hub's position, dispatched in order, kept in the ring. */
	private async run(): Promise<void> {
		while (!this.stopped) {
			let recs: OutboxRecord[] = [];
			let index: GrantIndex | undefined;
			this.signalled = false;
			try {
				recs = await this.outbox.readFrom(this.position, READ_BATCH);
				if (recs.length) index = await grantCache.get(this.broker);
			} catch (err) {
				this.logger.warn("live cursors: reading the change stream failed, retrying", (err as Error)?.message);
				await this.sleep(500);
				continue;
			}
			if (!recs.length || !index) {
				await this.sleep(this.pollMs);
				continue;
			}
			// In slices of LIVE_SLICE_MS: the records are decided in order, and each one's position moves with it, so a
			// stream that catches up or joins between two slices misses and doubles nothing.
			let sliceStart = performance.now();
			for (const rec of recs) {
				if (this.stopped) break;
				if (rec.seq <= this.position) continue;
				this.ring.push(rec);
				this.dispatch(rec, index);
				this.position = rec.seq;
				if (performance.now() - sliceStart >= LIVE_SLICE_MS) {
					await new Promise<void>((resolve) => setImmediate(resolve));
					index = await grantCache.get(this.broker).catch(() => index!);
					sliceStart = performance.now();
				}
			}
			if (this.ring.length > LIVE_RING) {
				const cut = this.ring.length - LIVE_RING / 2;
				this.floor = this.held = this.ring[cut - 1].seq;
				this.ring = this.ring.slice(cut);
			}
		}
	}

	private sleep(ms: number): Promise<void> {
		return new Promise((resolve) => {
			if (this.signalled || this.stopped) return resolve();
			const t = setTimeout(done, ms);
			function done() {
				clearTimeout(t);
				resolve();
			}
			this.wake = done;
		});
	}

	/** Each stream's bearer, authenticated again; a refusal (401) ends the stream with its frame. */
	async sweep(): Promise<void> {
		await Promise.all(
			[...this.subs].map(async (sub) => {
				try {
					await this.authenticator.authenticate(sub.req);
				} catch (err) {
					const code = (err as { code?: unknown })?.code;
					if (code === 401 || code === 403) this.end(sub, err);
				}
			}),
		);
	}

	private readonly uncork = (): void => {
		const subs = this.corked;
		this.corked = [];
		for (const sub of subs) {
			sub.corked = false;
			if (!sub.res.destroyed) sub.res.uncork();
		}
	};

	private keepAlive(): void {
		for (const sub of this.subs) this.write(sub, ": keep-alive\n\n");
	}

	/**
	 * Ends every open stream (their clients reconnect, to another gateway, with `Last-Event-ID`). Called when the
	 * node starts stopping: an open stream is a request the broker would otherwise wait on for its whole shutdown
	 * timeout before the service's `stopped` runs.
	 */
	endStreams(): void {
		for (const sub of [...this.subs]) sub.res.destroy();
	}

	async stop(): Promise<void> {
		this.stopped = true;
		for (const t of this.timers) clearInterval(t);
		this.wake?.();
		this.endStreams();
		if (this.started) {
			this.outbox.off("readable", this.onReadable);
			await this.started.catch(() => undefined);
			await this.outbox.disconnect();
		}
		for (const close of this.closers.splice(0)) await close().catch(() => undefined);
	}
}
