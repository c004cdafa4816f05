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
 *
 * This file is the hub (the feed, the index, the frames); its parts: one stream's request, state and limits
 * (./live-stream.ts), zone keys (./live-keys.ts), the ring of newest records (./live-ring.ts), the catch-up
 * (./live-catch-up.ts), the hold on the outbox's pruning (./live-hold.ts), sealed positions (./live-position.ts).
 */
import type { ServerResponse } from "http";
import { performance } from "perf_hooks";
import type { ServiceBroker } from "moleculer";
import { findCollection } from "../../catalog";
import { decideChange, imageOf, viewAt } from "../../authority/delivery";
import { grantCache } from "../../authority/grant-cache";
import type { StoreConfig } from "../../stores";
import { sharedOutbox, type Outbox, type OutboxRecord } from "../../events/outbox";
import { ApiError, toErrorBody } from "../../lib/errors";
import type { GrantIndex } from "../../lib/grants";
import { parseZones } from "../../lib/query-safety";
import type { RequestMeta, TokenClaims } from "../../lib/types";
import type { Authenticator } from "../../authority/authenticate";
import { catchUp, LIVE_SLICE_MS, READ_BATCH, type CatchUpHub } from "./live-catch-up";
import { holdOutbox } from "./live-hold";
import { recordKeys, subKeys } from "./live-keys";
import { Positions, streamOf, type StreamPositions } from "./live-position";
import { LiveRing } from "./live-ring";
import {
	closeStream,
	DOCUMENT_ID,
	expired,
	KEEP_ALIVE_MS,
	lastEventIdOf,
	LIVE_SWEEP_MS,
	liveRequested,
	MAX_BUFFERED,
	notAPosition,
	type Image,
	type LiveStart,
	type ReqLike,
	type Sub,
} from "./live-stream";

export { MAX_CATCH_UP_DOCS, LIVE_SLICE_MS } from "./live-catch-up";
export { LIVE_RING } from "./live-ring";
export { CLOSING_FRAME, KEEP_ALIVE_MS, lastEventIdOf, LIVE_RECONNECT_MS, LIVE_SWEEP_MS, liveRequested, MAX_BUFFERED, type LiveStart } from "./live-stream";

/** The hub looks again after this even without a signal (the outbox's feed signals every record it reads, any node's). */
const LIVE_IDLE_MS = 5000;

export class LiveCursors {
	private readonly outbox: Outbox;
	/** Subscribers by topic (`service.collection`), then zone key. */
	private readonly index = new Map<string, Map<string, Set<Sub>>>();
	private readonly subs = new Set<Sub>();
	/** The newest records, and the feed's position. */
	private readonly ring = new LiveRing();
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
	/** What a catch-up (./live-catch-up.ts) reads and calls of this. */
	private readonly hub: CatchUpHub;

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
		this.hub = {
			broker,
			outbox: this.outbox,
			ring: this.ring,
			stopped: () => this.stopped,
			wake: () => {
				void this.outbox.feed.wake();
				this.onReadable();
			},
			write: (sub, text) => this.write(sub, text),
			end: (sub, err) => this.end(sub, err),
			join: (sub) => this.join(sub),
		};
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
		if (this.ring.holds(seq)) return true;
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
		void catchUp(this.hub, sub);
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
		const keys = recordKeys(rec);
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
			this.ring.startAt((this.held = await this.outbox.head()));
			this.outbox.on("readable", this.onReadable);
			void this.run();
			this.timers.push(setInterval(() => void this.sweep(), LIVE_SWEEP_MS));
			this.timers.push(setInterval(() => this.keepAlive(), KEEP_ALIVE_MS));
			if (this.sharedStore) await this.hold();
			for (const t of this.timers) t.unref();
		})();
		return this.started;
	}

	/** Keeps the outbox's pruner from removing what this gateway's clients may resume from (./live-hold.ts). */
	private async hold(): Promise<void> {
		const hold = await holdOutbox(this.cfg, this.broker.nodeID, { get: () => this.held, set: (seq) => (this.held = seq) }, this.logger);
		this.timers.push(hold.timer);
		this.closers.push(hold.close);
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
				recs = await this.outbox.readFed(this.ring.position, READ_BATCH);
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
				if (rec.seq <= this.ring.position) continue;
				this.ring.push(rec);
				this.dispatch(rec, index);
				this.ring.position = rec.seq;
				if (performance.now() - sliceStart >= LIVE_SLICE_MS) {
					await new Promise<void>((resolve) => setImmediate(resolve));
					index = await grantCache.get(this.broker).catch(() => index!);
					sliceStart = performance.now();
				}
			}
			const floor = this.ring.trim();
			if (floor !== undefined) this.held = floor;
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
