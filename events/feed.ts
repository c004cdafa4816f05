/**
 * The change feed: one reader of the outbox per process. It reads each record once, keeps the newest FEED_RING of
 * them parsed in memory, and signals every reader of the process (the consumer groups, the relay, the search index,
 * the live cursors), which then read from that memory instead of each polling the outbox.
 *
 * It reads when woken: at once by an append of this process and by PostgreSQL's NOTIFY of an append of any process
 * (LISTEN on the outbox's channel), and every FEED_POLL_MS whatever happens (a notification lost with its connection
 * costs at most that). Every read has a deadline (FEED_READ_MS): a read on a connection that went silent is given up
 * and the next one tries a new connection, so the feed resumes within seconds of the database answering again.
 *
 * Invariant (commit order, stores/pg.outbox.ts): positions become visible in order, so once the feed has read
 * up to `position`, every record that will ever exist at or below it has been read. The ring therefore holds every
 * record with `floor < seq <= position`, without gaps: a reader whose position lies in that range gets exactly what
 * a read of the outbox would give; any other reader reads the outbox itself.
 */
import { EventEmitter } from "events";
import type { Listening } from "../stores/pg.outbox";

/** The feed's safety net: it reads this often even when nothing signalled (a lost notification, a listener being re-established). */
export const FEED_POLL_MS = 1000;
/** A read of the feed that has no answer within this is given up (its connection too); the next read tries again. */
export const FEED_READ_MS = 5000;
/** How many records the feed keeps in memory; readers further behind read the outbox. */
export const FEED_RING = 4096;
/** Records per read of the outbox. */
const FEED_BATCH = 500;
/** After an append or a notification, the feed reads this much later, once for the whole burst. */
export const FEED_LINGER_MS = 10;
/** How often the listening connection is checked (a connection that went silent delivers no notification). */
const LISTEN_CHECK_MS = 5000;
/** A listener that failed or went silent is set up again after this. */
const RELISTEN_MS = 1000;

/** What the feed reads: the outbox table of one database. */
export interface FeedSource<R extends { seq: number }> {
	head(): Promise<number>;
	readFrom(after: number, limit: number, deadlineMs: number): Promise<R[]>;
	/** LISTEN for appends; resolves once listening, with its health check and its end. */
	listen(onNotify: () => void, onLost: () => void): Promise<Listening>;
}

/** How the feed reports whether it moves (runtime/health.ts's Progress: /status names a feed that cannot read). */
export interface FeedProgress {
	moved(): void;
	failed(err: unknown): void;
	step<T>(what: string, fn: () => Promise<T>): Promise<T>;
	close(): void;
}

export class ChangeFeed<R extends { seq: number }> extends EventEmitter {
	/** Every record with floor < seq <= position, in order (see the invariant above). */
	private ring: R[] = [];
	private floor = 0;
	/** The newest position read; -1 until the feed has started. */
	private position = -1;
	private pulling?: Promise<void>;
	private again = false;
	private lingering?: NodeJS.Timeout;
	private poll?: NodeJS.Timeout;
	private check?: NodeJS.Timeout;
	private relisten?: NodeJS.Timeout;
	private listening?: Listening;
	private running = false;
	private progress?: FeedProgress;
	/** Reads of the outbox the feed made (tests and operators: one reader per process). */
	reads = 0;

	private readonly track?: () => FeedProgress;
	private readonly pollMs: number;
	private readonly ringSize: number;

	/** `track`: a stage of /status per run; `pollMs` and `ring`: FEED_POLL_MS and FEED_RING unless given (tests). */
	constructor(
		private readonly source: FeedSource<R>,
		opts: { track?: () => FeedProgress; pollMs?: number; ring?: number } = {},
	) {
		super();
		this.track = opts.track;
		this.pollMs = opts.pollMs ?? FEED_POLL_MS;
		this.ringSize = opts.ring ?? FEED_RING;
	}

	get started(): boolean {
		return this.position >= 0;
	}

	/** Starts from the outbox's head (records before it are read from the outbox by whoever needs them). */
	async start(): Promise<void> {
		if (this.running) return;
		this.running = true;
		this.progress = this.track?.();
		let head: number;
		try {
			head = await this.source.head();
		} catch (err) {
			this.running = false;
			this.progress?.close();
			this.progress = undefined;
			throw err;
		}
		if (!this.running) return;
		this.position = this.floor = head;
		this.poll = setInterval(() => void this.wake(), this.pollMs);
		this.poll.unref();
		this.check = setInterval(() => void this.checkListener(), LISTEN_CHECK_MS);
		this.check.unref();
		await this.listen();
	}

	async stop(): Promise<void> {
		this.running = false;
		for (const t of [this.poll, this.check]) if (t) clearInterval(t);
		for (const t of [this.lingering, this.relisten]) if (t) clearTimeout(t);
		this.poll = this.check = this.lingering = this.relisten = undefined;
		this.listening?.close();
		this.listening = undefined;
		this.progress?.close();
		this.progress = undefined;
		await this.pulling;
		this.ring = [];
		this.position = -1;
	}

	/** An append of this process (or a notification of another's): read once for the whole burst. */
	signal(): void {
		if (!this.running || this.lingering) return;
		this.lingering = setTimeout(() => {
			this.lingering = undefined;
			this.wake();
		}, FEED_LINGER_MS);
	}

	/** Reads now (after the read in flight, if any); resolves when the feed has read everything committed before the call. */
	wake(): Promise<void> {
		if (!this.running || this.position < 0) return Promise.resolve();
		if (this.pulling) {
			// The read in flight reads once more before it ends.
			this.again = true;
			return this.pulling;
		}
		this.pulling = this.pull().finally(() => (this.pulling = undefined));
		return this.pulling;
	}

	/**
	 * The records after `after` (at most `limit`), when the feed holds that span; undefined when it does not (the
	 * reader is behind the ring, or ahead of the feed, or the feed has not started): the reader reads the outbox.
	 */
	read(after: number, limit: number): R[] | undefined {
		if (this.position < 0 || after < this.floor || after > this.position) return undefined;
		let lo = 0;
		let hi = this.ring.length;
		while (lo < hi) {
			const mid = (lo + hi) >> 1;
			if (this.ring[mid].seq <= after) lo = mid + 1;
			else hi = mid;
		}
		return this.ring.slice(lo, lo + limit);
	}

	private async pull(): Promise<void> {
		do {
			this.again = false;
			let batch: R[];
			try {
				this.reads++;
				const read = () => this.source.readFrom(this.position, FEED_BATCH, FEED_READ_MS);
				batch = this.progress ? await this.progress.step("reading the outbox", read) : await read();
			} catch (err) {
				// The next signal or poll reads again (on a new connection when this one was given up).
				this.progress?.failed(err);
				return;
			}
			if (!this.running) return;
			this.progress?.moved();
			if (batch.length) {
				for (const rec of batch) if (rec.seq > this.position) this.ring.push(rec);
				this.position = Math.max(this.position, batch[batch.length - 1].seq);
				if (this.ring.length > this.ringSize) {
					const cut = this.ring.length - this.ringSize;
					this.floor = this.ring[cut - 1].seq;
					this.ring = this.ring.slice(cut);
				}
				this.emit("readable");
			}
			if (batch.length === FEED_BATCH) this.again = true;
		} while (this.again && this.running);
	}

	private async listen(): Promise<void> {
		if (!this.running || this.listening) return;
		let l: Listening | undefined;
		let gone = false;
		try {
			l = await this.source.listen(
				() => this.signal(),
				() => {
					gone = true;
					this.lost(l);
				},
			);
			if (gone) return;
			if (!this.running) return l.close();
			this.listening = l;
			// What was appended while no one listened.
			void this.wake();
		} catch {
			this.lost();
		}
	}

	/** The listening connection ended or went silent: listen again soon; meanwhile the poll reads. */
	private lost(l?: Listening): void {
		if (l && this.listening && this.listening !== l) return;
		l?.close();
		this.listening?.close();
		this.listening = undefined;
		if (!this.running || this.relisten) return;
		this.relisten = setTimeout(() => {
			this.relisten = undefined;
			void this.listen();
		}, RELISTEN_MS);
		this.relisten.unref();
	}

	private async checkListener(): Promise<void> {
		const l = this.listening;
		if (!l) return;
		if (!(await l.check().catch(() => false))) this.lost(l);
	}
}
