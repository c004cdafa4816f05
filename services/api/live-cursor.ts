/**
 * Live cursors (`GET /{service}/{collection}/cursor?live=true`): after the cursor's matches, one `event: live` frame,
 * then one `event: change` frame per change of the caller's view, read from the durable change stream (the outbox),
 * in commit order.
 *
 * - The feed: each gateway reads the outbox after its position through the process's change feed (events/feed.ts:
 *   woken by this process's appends and by PostgreSQL's notification of any node's) and keeps the newest LIVE_RING
 *   records for resumption. A position is sealed for its stream (./live-position.ts): a position of another stream is refused.
 * - Catch-up (a resume, and the changes between the listing's start and the stream joining the feed): the stream's
 *   own collection only, each document once, as it is at the end of the catch-up (catchUp).
 * - Who a change can concern: subscribers are indexed by zone keys (own and share: `u:<identity>`; group:
 *   `g:<tenant>/<group>`; client: `c:<client>`). A change looks up the keys of its document before and after, so
 *   its cost grows with the subscribers it can concern, not with all of them.
 * - Exactness: for each of those, the caller's view is decided again with the authority layer's own code
 *   (authority/authority.ts: scope, grant with its time and location, `enforce` with zones, row filter, `query` and
 *   `projection`), from the grant index of the moment; the document before and after the change is matched against
 *   the view's filter, and presented as a GET presents it: the delivery decision of authority/delivery.ts, which MQTT
 *   delivery asks too. A document in neither image of the view is never named.
 * - Token validity: every LIVE_SWEEP_MS (and at once after a revocation broadcast) each stream's bearer is
 *   authenticated again as a request would be; a refusal ends the stream with its 401 frame.
 */
import type { IncomingMessage, ServerResponse } from "http";
import { performance } from "perf_hooks";
import type { ServiceBroker } from "moleculer";
import { findCollection } from "../../catalog";
import { admitsNow, decideChange, decideSpan, imageOf, viewAt, type Watcher } from "../../authority/delivery";
import { grantCache } from "../../authority/grant-cache";
import { createStore, type DocumentStore, type StoreConfig } from "../../stores";
import { sharedOutbox, type Outbox, type OutboxRecord } from "../../events/outbox";
import { ApiError, toErrorBody } from "../../lib/errors";
import type { GrantIndex } from "../../lib/grants";
import { parseZones } from "../../lib/query-safety";
import { identityOf, type RequestMeta, type TokenClaims } from "../../lib/types";
import type { Authenticator } from "../../authority/authenticate";
import { Positions, streamOf, type StreamPositions } from "./live-position";

/** Records kept in memory for resumption (Last-Event-ID) on this gateway; older positions are read from the outbox. */
export const LIVE_RING = 20_000;
/** The hub looks again after this even without a signal (the outbox's feed signals every record it reads, any node's). */
const LIVE_IDLE_MS = 5000;
/** How often each stream's token is checked again (revocation, logout, deactivation, expiry: 401 within 2 s). */
export const LIVE_SWEEP_MS = 1000;
/** A comment line at least this often (docs/contracts.md "Realtime: live cursors and MQTT in the browser": at least every 15 s). */
export const KEEP_ALIVE_MS = 14_000;
/** A client that reads less than its changes: past this much unsent data its stream is cut (it resumes by position). */
export const MAX_BUFFERED = 4 * 1024 * 1024;
const READ_BATCH = 500;
/** The longest a resume waits for this gateway's feed to read the writes answered before it (see reach). */
const LIVE_REACH_MS = 5000;
/**
 * The longest the feed decides records in one go before it lets the event loop turn (sockets flush, requests and
 * other streams are served): a burst of commits read as one batch of hundreds of records, each written to many
 * streams, would otherwise hold the loop for hundreds of milliseconds (docs/benchmarks.md, "Live cursors").
 */
export const LIVE_SLICE_MS = 8;
/** How often a gateway renews its hold on the outbox's pruning (the hold counts while renewed: STREAM_POSITION_TTL_MS). */
const HOLD_EVERY_MS = 30_000;
/**
 * The most documents one catch-up holds (each document's last change, until the span is read): a stream further
 * behind answers 410, and a fresh listing costs less than replaying that much.
 */
export const MAX_CATCH_UP_DOCS = 10_000;
/**
 * What a stopping gateway's streams end with: `retry:` sets the delay after which `EventSource` connects again (with
 * its `Last-Event-ID`, to another gateway behind the proxy, or to this one restarted); a comment says why. No
 * `event: error`: a client that closes its source on an error frame with data (docs/api.md) must not stop here.
 */
export const LIVE_RECONNECT_MS = 1000;
export const CLOSING_FRAME = `: this gateway is stopping; reconnect\nretry: ${LIVE_RECONNECT_MS}\n\n`;

/**
 * Ends a stream with CLOSING_FRAME, then its connection once the frame is out: the stream's `Connection: keep-alive`
 * would otherwise keep the socket open after the response, and the stopping server waits for every socket.
 */
function closeStream(res: ServerResponse): void {
	if (res.destroyed || res.writableEnded) return;
	const socket = res.socket;
	res.end(CLOSING_FRAME, () => socket?.end());
}

/** A `Last-Event-ID` that is a document id resumes the listing (streamCursor); anything else must be a position. */
const DOCUMENT_ID = /^[0-9a-f]{24}$/i;
const notAPosition = () => new ApiError(400, "Last-Event-ID is not a position of this stream; reconnect without it to start over");
const expired = () => new ApiError(410, "Last-Event-ID is older than this stream's retention; reconnect without it to start over");

/**
 * A cursor request's Last-Event-ID: the header, else `?lastEventId=`, which EventSource polyfills add on a reconnect
 * (a browser's own EventSource sends the header only).
 */
export function lastEventIdOf(headers: IncomingMessage["headers"], query: Record<string, unknown> | undefined): unknown {
	return headers["last-event-id"] ?? query?.lastEventId;
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

/** A document image of a change, in stored form (`_id`), as the delivery decision takes it. */
type Image = NonNullable<ReturnType<typeof imageOf>>;

/** A live stream: the watcher the delivery decision takes, and where its frames go. */
interface Sub extends Watcher {
	res: ServerResponse;
	req: ReqLike;
	topic: string;
	keys: string[];
	/** Its positions, sealed for it alone (./live-position.ts). */
	positions: StreamPositions;
	/** The last position decided for this stream. */
	pos: number;
	/** Resuming in the middle of a catch-up: the documents whose last change is at or before this were sent. */
	sent?: number;
	/** A resume: the store's head when it was asked for; its catch-up reaches at least this far (see catchUp). */
	target?: number;
	/** Caught up with the hub: in the index, fed as records arrive. */
	live: boolean;
	closed: boolean;
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
	/** The gateway is stopping: no stream stays open, a new one is closed as soon as it is attached. */
	private closing = false;
	private wake?: () => void;
	private timers: NodeJS.Timeout[] = [];
	/** Set by the outbox's `readable` (appends of this process); a sleep that finds it set returns at once. */
	private signalled = false;
	private readonly onReadable = () => {
		this.signalled = true;
		this.wake?.();
	};
	private readonly positions: Positions;

	/** `secret`: the deployment's AES_SECRET, which positions are sealed with (every gateway opens every other's). */
	constructor(
		private readonly broker: ServiceBroker,
		private readonly cfg: StoreConfig & { namespace?: string; eventStream?: string; nodeID?: string },
		private readonly authenticator: Pick<Authenticator, "authenticate">,
		private readonly logger: { warn(...a: unknown[]): void },
		secret: string,
	) {
		this.outbox = sharedOutbox(cfg);
		this.positions = new Positions(secret);
	}

	/** Documents and outbox in a database other nodes share (DATABASE_URL). */
	private get sharedStore(): boolean {
		return !!(this.cfg as { databaseUrl?: string }).databaseUrl;
	}

	/** Open live streams on this gateway (metrics, bench). */
	get size(): number {
		return this.subs.size;
	}

	/**
	 * Validates a live request before any header leaves (400 for a bad `live` or query, 403 like the cursor, 501 when
	 * this gateway cannot read the change stream) and takes the position its changes start from: the outbox's head
	 * before the listing, or the position of `Last-Event-ID` / `?last_event_id=` (a document id there resumes the
	 * listing instead). A position that is not this stream's answers `event: error` with 400, one past the retention
	 * with 410. Undefined when the request is not live.
	 */
	async prepare(req: ReqLike & { $ctx: { meta: RequestMeta } }, action: string, params: { query?: Record<string, unknown> }): Promise<LiveStart | undefined> {
		const query = (params.query ?? {}) as Record<string, unknown>;
		if (!liveRequested(query)) return undefined;
		// A stopping gateway lists nothing: the client reconnects (a refusal would make `EventSource` give up).
		if (this.closing) return { resumes: true, attach: (res) => closeStream(res) };
		const [service, ...rest] = action.split(".");
		const collection = rest.slice(0, -1).join(".");
		const ref = findCollection(service, collection);
		if (!ref) throw new ApiError(404, "not found");
		if (!this.sharedStore && !this.broker.getLocalService(service))
			throw new ApiError(501, "live cursors need the change stream on this gateway: run it with the domain services, or on a shared document store (DATABASE_URL)");
		await this.start();
		const meta = req.$ctx.meta;
		const token = meta.token as TokenClaims;
		const headers: Record<string, string> = {};
		for (const [k, v] of Object.entries(meta.headers ?? {})) if (v !== undefined) headers[k] = v;
		const sub: Sub = {
			res: undefined as unknown as ServerResponse,
			req: { headers: req.headers, query: req.query, socket: { remoteAddress: req.socket?.remoteAddress } },
			token,
			topic: `${service}.${collection}`,
			col: ref.collection,
			meta: { service, collection, op: "cursor", level: "read" },
			query,
			headers,
			ip: meta.ip,
			keys: subKeys(parseZones(query.zone ?? headers["x-zone"]), token),
			positions: undefined as unknown as StreamPositions,
			pos: 0,
			live: false,
			closed: false,
			mark: -1,
		};
		// The view as the authority layer makes it: a refusal (scope, grant, a bad or hidden query field) answers now.
		viewAt(sub, await grantCache.get(this.broker));
		sub.positions = this.positions.of(streamOf(token, sub.topic, query, headers));
		const raw = lastEventIdOf(req.headers, query) ?? query.last_event_id;
		const text = raw === undefined ? "" : String(Array.isArray(raw) ? raw[0] : raw).trim();
		if (text && !DOCUMENT_ID.test(text)) {
			const at = sub.positions.open(text);
			const refused = !at ? notAPosition() : !(await this.kept(at.base)) ? expired() : undefined;
			if (at) Object.assign(sub, { pos: at.base, sent: at.upto });
			// Every write answered before this request is in its catch-up, even when this gateway's feed has not read it yet.
			sub.target = await this.outbox.head();
			return { resumes: true, attach: (res) => (refused ? this.end(Object.assign(sub, { res }), refused) : this.attach(sub, res, false)) };
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
		if (this.closing) return closeStream(res);
		this.subs.add(sub);
		res.once("close", () => this.drop(sub));
		if (announce) this.write(sub, `id: ${sub.positions.seal(sub.pos)}\nevent: live\ndata: {}\n\n`);
		void this.catchUp(sub);
	}

	/**
	 * Feeds a stream the changes between its position and the hub's, then puts it in the index (from then on the
	 * feed decides each record for it as it arrives).
	 *
	 * Those changes are taken as one span per round, not replayed: the records of the stream's collection whose
	 * document the view admits in some image of the span, coalesced per document, then one frame per document in the
	 * order of its last change, deciding its last image (decideSpan): in view, the document as it is at the span's end;
	 * out of view or gone, a `leave` without data. A state since redacted, or a document since destroyed, is never
	 * sent; a document the view never admitted in the span is never named. Records of other collections are never
	 * looked at (their documents are no business of this view).
	 *
	 * Each frame's position is (the span's start, the document's last change): a client cut off in the middle resumes
	 * with the same span, less the documents whose last change it already had. Changes that arrive meanwhile make
	 * the next, short, round.
	 */
	private async catchUp(sub: Sub): Promise<void> {
		try {
			if (sub.target !== undefined) await this.reach(sub.target);
			while (!sub.closed) {
				const end = this.position;
				if (sub.pos >= end) return this.join(sub);
				await this.span(sub, end);
			}
		} catch (err) {
			this.end(sub, err);
		}
	}

	/**
	 * Waits (at most LIVE_REACH_MS) until the feed has read the outbox up to `seq`: a resume's first span must end at or
	 * after every write answered before it, or it would send a document in a state its next change already replaced.
	 */
	private async reach(seq: number): Promise<void> {
		if (this.position >= seq) return;
		// The feed reads now (one in flight reads once more); its `readable` wakes the hub. One wake of the hub too: a
		// read of its own in flight is followed by another at once (`signalled`).
		void this.outbox.feed.wake();
		this.onReadable();
		const deadline = performance.now() + LIVE_REACH_MS;
		while (this.position < seq && !this.stopped && performance.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
	}

	/** One round of catchUp: the span from the stream's position to `end`. */
	private async span(sub: Sub, end: number): Promise<void> {
		const base = sub.pos;
		const sent = sub.sent ?? base;
		sub.sent = undefined;
		/** By document: whether the view admitted it at the span's start, and its last record of the span. */
		const docs = new Map<string, { was: boolean; last: OutboxRecord }>();
		let at = base;
		while (at < end && !sub.closed) {
			const recs = at >= this.floor ? this.ringAfter(at) : await this.outbox.readFed(at, READ_BATCH);
			// Nothing after `at` up to `end` (a store that lost them): read as caught up, as the feed would.
			if (!recs.length) at = end;
			const index = await grantCache.get(this.broker);
			for (const rec of recs) {
				if (rec.seq > end || sub.closed) break;
				at = rec.seq;
				if (rec.event.topic !== sub.topic || !this.concerns(sub, rec)) continue;
				const held = docs.get(rec.event.id);
				if (held) held.last = rec;
				else {
					const was = admitsNow(sub, index, imageOf(rec.event.before));
					if (was || admitsNow(sub, index, imageOf(rec.event.after))) docs.set(rec.event.id, { was, last: rec });
				}
			}
			if (recs.length && recs[recs.length - 1].seq > end) at = end;
			if (docs.size > MAX_CATCH_UP_DOCS)
				throw new ApiError(
					410,
					`this stream is too far behind its position: more than ${MAX_CATCH_UP_DOCS} documents of its view changed since; reconnect without Last-Event-ID to start over`,
				);
		}
		const order = [...docs].filter(([, d]) => d.last.seq > sent).sort(([, a], [, b]) => a.last.seq - b.last.seq);
		let index = await grantCache.get(this.broker);
		let sliceStart = performance.now();
		for (const [id, d] of order) {
			if (sub.closed) return;
			const frame = decideSpan(sub, index, id, d.was, imageOf(d.last.event.after));
			if (frame) this.write(sub, `id: ${sub.positions.seal(base, d.last.seq)}\nevent: change\ndata: ${JSON.stringify(frame)}\n\n`);
			if (performance.now() - sliceStart >= LIVE_SLICE_MS) {
				await new Promise<void>((resolve) => setImmediate(resolve));
				index = await grantCache.get(this.broker);
				sliceStart = performance.now();
			}
		}
		sub.pos = at;
	}

	/** Whether a record's document can be in the stream's view: it has a zone key of the stream (as the feed's index). */
	private concerns(sub: Sub, rec: OutboxRecord): boolean {
		const keys = new Set<string>();
		docKeys(rec.event.before, keys);
		docKeys(rec.event.after, keys);
		return sub.keys.some((k) => keys.has(k));
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

	/** Decides one change for one stream and writes its frame, if the change touches the view. */
	private deliver(sub: Sub, rec: OutboxRecord, index: GrantIndex, before: Image | undefined, after: Image | undefined): void {
		sub.pos = rec.seq;
		let d;
		try {
			d = decideChange(sub, index, rec.event.id, before, after);
		} catch (err) {
			// A limit met while deciding ends this stream with its 4xx; the feed goes on for the others.
			return this.end(sub, err);
		}
		if (d) this.write(sub, `id: ${sub.positions.seal(rec.seq)}\nevent: change\ndata: ${JSON.stringify(d)}\n\n`);
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
				recs = await this.outbox.readFed(this.position, READ_BATCH);
				if (recs.length) index = await grantCache.get(this.broker);
			} catch (err) {
				this.logger.warn("live cursors: reading the change stream failed, retrying", (err as Error)?.message);
				await this.sleep(500);
				continue;
			}
			if (!recs.length || !index) {
				await this.sleep(LIVE_IDLE_MS);
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
					const { token } = await this.authenticator.authenticate(sub.req);
					// The token as its user is now (a role or group taken away): the view is decided again with it.
					if (token !== sub.token) {
						sub.token = token;
						sub.view = undefined;
					}
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
	 * Ends every open stream with CLOSING_FRAME (their clients reconnect, to another gateway, with `Last-Event-ID`),
	 * and every stream attached from now on. Called when the node starts stopping: an open stream is a request the
	 * broker would otherwise wait on for its whole shutdown timeout before the service's `stopped` runs.
	 */
	endStreams(): void {
		this.closing = true;
		for (const sub of [...this.subs]) {
			this.drop(sub);
			closeStream(sub.res);
		}
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
