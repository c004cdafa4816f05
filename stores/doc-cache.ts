/**
 * The documents a node read by id, kept in memory per database (one per process and database), exact across nodes.
 *
 * Invalidation: every insert, update, delete and truncate of a document table notifies DOCS_CHANNEL at its commit,
 * by a statement trigger of the table (stores/pg.store.ts installs it), with the ids it touched, whoever wrote: this
 * node, another node, a worker, a restore, a hand-written SQL statement. The cache LISTENs on that channel and drops
 * what a notification names.
 *
 * Exactness (a read never answers a document older than a write that committed before the read began): a kept
 * document is served only after a fence: the cache sends a notification of its own (`pg_notify` in a transaction of
 * its own, begun after the read arrived) and waits for it on the listening connection. PostgreSQL delivers
 * notifications in commit order, so by the time the fence arrives, every notification of a transaction that
 * committed before the read began has arrived and been applied. Reads that arrive while a fence is out wait for the
 * next one: one fence serves every hit that arrived before it was sent (its cost is shared by the concurrent reads).
 *
 * A document read from the database is kept only if no notification for its table arrived while it was read (a
 * write between the read's snapshot and the keeping would otherwise be kept over). While the listener is down
 * (starting, lost, silent, a fence not back within FENCE_MS), nothing is served from or kept in memory, and whatever
 * was kept is dropped: notifications sent meanwhile are lost.
 *
 * Kept documents are deeply frozen: callers share them and must not change them.
 */
import { randomBytes } from "crypto";
import type { StoredDoc } from "../catalog/store";
import { DEFAULT_DOC_CACHE_SIZE as DOC_CACHE_SIZE } from "../runtime/config";
import type { Relational } from "../runtime/relational";
import { listenOn, type Listening } from "./pg-listen";

export const DOCS_CHANNEL = "platform_docs";
/** The trigger function every document table calls (versioned: a new body gets a new name, and tables move to it). */
export const DOCS_TRIGGER_FUNCTION = "platform_docs_changed_v1";
/** A fence not back within this: the listener is taken as silent (dropped and set up again). */
const FENCE_MS = 1000;
/** How often the listening connection is checked, and how soon a lost one is set up again. */
const CHECK_MS = 5000;
const RELISTEN_MS = 1000;
/** A fence's payload starts with this; a table's notification starts with the table's name (never with `!`). */
const FENCE = "!";

/** The statements that make `table` (quoted) notify DOCS_CHANNEL: the function (once per database) and four triggers. */
export function docsTriggerDdl(table: string): string[] {
	const fn = DOCS_TRIGGER_FUNCTION;
	return [
		`do $do$ begin if to_regprocedure('${fn}()') is null then ` +
			`create function ${fn}() returns trigger language plpgsql as $f$ declare ids text; begin ` +
			`if TG_OP = 'TRUNCATE' then ids := '*'; ` +
			`elsif TG_OP = 'INSERT' then select json_agg(id)::text into ids from platform_new; ` +
			`elsif TG_OP = 'DELETE' then select json_agg(id)::text into ids from platform_old; ` +
			`else select json_agg(id)::text into ids from (select id from platform_new union select id from platform_old) u; end if; ` +
			`if ids is null then return null; end if; ` +
			// A payload has at most 8000 bytes: a statement that touched more ids drops the table's kept documents.
			`if octet_length(ids) > 7000 then ids := '*'; end if; ` +
			`perform pg_notify('${DOCS_CHANNEL}', TG_TABLE_NAME || ' ' || ids); return null; end $f$; end if; end $do$`,
		`create or replace trigger platform_docs_insert after insert on ${table} referencing new table as platform_new for each statement execute function ${fn}()`,
		`create or replace trigger platform_docs_update after update on ${table} referencing old table as platform_old new table as platform_new for each statement execute function ${fn}()`,
		`create or replace trigger platform_docs_delete after delete on ${table} referencing old table as platform_old for each statement execute function ${fn}()`,
		`create or replace trigger platform_docs_truncate after truncate on ${table} for each statement execute function ${fn}()`,
	];
}

/** The statements that make `table` (quoted) notify nothing (a table read through no cache); no-ops where it does not. */
export function docsTriggerDrop(table: string): string[] {
	return ["insert", "update", "delete", "truncate"].map((op) => `drop trigger if exists platform_docs_${op} on ${table}`);
}

/** The statement that tells whether `table` (quoted) already notifies through DOCS_TRIGGER_FUNCTION (4 triggers). */
export function docsTriggerCheck(table: string): { text: string; values: unknown[] } {
	return {
		text: `select count(*)::int as n from pg_trigger t join pg_proc p on p.oid = t.tgfoid where t.tgrelid = to_regclass($1) and p.proname = $2`,
		values: [table, DOCS_TRIGGER_FUNCTION],
	};
}

function deepFreeze<T>(v: T): T {
	if (v && typeof v === "object" && !Object.isFrozen(v)) {
		Object.freeze(v);
		for (const k of Object.keys(v)) deepFreeze((v as Record<string, unknown>)[k]);
	}
	return v;
}

interface Waiting {
	promise: Promise<boolean>;
	resolve(ok: boolean): void;
}

function waiting(): Waiting {
	let resolve!: (ok: boolean) => void;
	const promise = new Promise<boolean>((r) => (resolve = r));
	return { promise, resolve };
}

/** Every cache's counters together, in this process (tests, /metrics). */
const totals = { hits: 0, misses: 0, fences: 0 };
export function docCacheStats(): Readonly<typeof totals> {
	return { ...totals };
}

export class DocCache {
	/** `table \0 id` → the document, least recently read first. */
	private readonly docs = new Map<string, StoredDoc>();
	/** Notifications seen per table (a read keeps its document only if its table's count did not move meanwhile). */
	private readonly epochs = new Map<string, number>();
	/** Moves when the listener is lost: a read begun before keeps nothing. */
	private generation = 0;
	private listening?: Listening;
	private starting?: Promise<void>;
	private check?: NodeJS.Timeout;
	private relisten?: NodeJS.Timeout;
	private closed = false;
	/** The fence out (sent, not back), and the one the reads arriving meanwhile wait for. */
	private out?: { token: string; waiting: Waiting; timer: NodeJS.Timeout };
	private next?: Waiting;
	private readonly prefix = FENCE + randomBytes(6).toString("hex") + ":";
	private fences = 0;
	/** Counters (tests, /metrics): reads served from memory, reads that went to the database, fences sent. */
	readonly stats = { hits: 0, misses: 0, fences: 0 };

	constructor(
		private readonly rel: Relational,
		private readonly size = DOC_CACHE_SIZE,
	) {}

	/** Whether kept documents are served now (the listener is up). */
	get serving(): boolean {
		return !!this.listening;
	}

	/**
	 * The document `id` of `table` (its name as PostgreSQL reports it), from memory when kept (after a fence), else
	 * `load`'s, kept when nothing of its table changed meanwhile. A kept document is frozen.
	 */
	async read(table: string, id: string, load: () => Promise<StoredDoc | null>): Promise<StoredDoc | null> {
		if (this.size <= 0) return load();
		if (!this.listening) {
			void this.start();
			return load();
		}
		const key = table + "\0" + id;
		const kept = this.docs.get(key);
		if (kept && (await this.fence()) && this.docs.get(key) === kept) {
			this.stats.hits++;
			totals.hits++;
			// The most recently read goes last (the first ones are dropped when the cache is full).
			this.docs.delete(key);
			this.docs.set(key, kept);
			return kept;
		}
		this.stats.misses++;
		totals.misses++;
		const epoch = this.epochs.get(table) ?? 0;
		const generation = this.generation;
		const doc = await load();
		if (doc && this.listening && this.generation === generation && (this.epochs.get(table) ?? 0) === epoch) {
			this.docs.delete(key);
			this.docs.set(key, deepFreeze(doc));
			if (this.docs.size > this.size) this.docs.delete(this.docs.keys().next().value!);
		}
		return doc;
	}

	/** How many documents are kept (tests). */
	get kept(): number {
		return this.docs.size;
	}

	/** Starts listening (once; again after a loss). Reads go to the database until it listens. */
	start(): Promise<void> {
		if (this.closed || this.listening) return Promise.resolve();
		this.starting ??= this.listen().finally(() => (this.starting = undefined));
		return this.starting;
	}

	close(): void {
		this.closed = true;
		this.lost();
	}

	private async listen(): Promise<void> {
		let l: Listening | undefined;
		let gone = false;
		try {
			l = await listenOn(
				this.rel,
				DOCS_CHANNEL,
				(payload) => this.notified(payload),
				() => {
					gone = true;
					if (this.listening === l) this.lost();
				},
			);
		} catch {
			this.again();
			return;
		}
		if (gone) return this.again();
		if (this.closed) return l.close();
		this.listening = l;
		this.check ??= setInterval(() => void this.checkListener(), CHECK_MS);
		this.check.unref();
	}

	private notified(payload: string): void {
		if (payload.startsWith(FENCE)) {
			const out = this.out;
			if (!out || payload !== out.token) return;
			clearTimeout(out.timer);
			this.out = undefined;
			out.waiting.resolve(true);
			this.sendNext();
			return;
		}
		const space = payload.indexOf(" ");
		if (space < 0) return;
		const table = payload.slice(0, space);
		const ids = payload.slice(space + 1);
		this.epochs.set(table, (this.epochs.get(table) ?? 0) + 1);
		if (ids === "*") {
			const prefix = table + "\0";
			for (const key of this.docs.keys()) if (key.startsWith(prefix)) this.docs.delete(key);
			return;
		}
		let list: unknown;
		try {
			list = JSON.parse(ids);
		} catch {
			list = undefined;
		}
		if (!Array.isArray(list)) {
			// Not a payload of our trigger: drop the table's documents rather than guess.
			const prefix = table + "\0";
			for (const key of this.docs.keys()) if (key.startsWith(prefix)) this.docs.delete(key);
			return;
		}
		for (const id of list) this.docs.delete(table + "\0" + String(id));
	}

	/** Resolves true once every notification committed before this call has been applied; false when that is not known. */
	private fence(): Promise<boolean> {
		this.next ??= waiting();
		const w = this.next;
		if (!this.out) this.sendNext();
		return w.promise;
	}

	private sendNext(): void {
		const w = this.next;
		if (!w || this.out) return;
		this.next = undefined;
		if (!this.listening) return w.resolve(false);
		const token = this.prefix + ++this.fences;
		this.stats.fences++;
		totals.fences++;
		const timer = setTimeout(() => {
			// Not back in time: the listener may be silent, so what is kept may be stale.
			if (this.out?.token === token) this.lost();
		}, FENCE_MS);
		timer.unref();
		this.out = { token, waiting: w, timer };
		this.rel.query("select pg_notify($1, $2)", [DOCS_CHANNEL, token]).catch(() => {
			if (this.out?.token === token) this.lost();
		});
	}

	/** The listener is gone or silent: nothing kept can be trusted; serve from the database until listening again. */
	private lost(): void {
		this.generation++;
		this.docs.clear();
		const l = this.listening;
		this.listening = undefined;
		l?.close();
		const out = this.out;
		this.out = undefined;
		if (out) {
			clearTimeout(out.timer);
			out.waiting.resolve(false);
		}
		const next = this.next;
		this.next = undefined;
		next?.resolve(false);
		if (this.closed) {
			if (this.check) clearInterval(this.check);
			if (this.relisten) clearTimeout(this.relisten);
			this.check = this.relisten = undefined;
			return;
		}
		this.again();
	}

	private again(): void {
		if (this.closed || this.relisten) return;
		this.relisten = setTimeout(() => {
			this.relisten = undefined;
			void this.start();
		}, RELISTEN_MS);
		this.relisten.unref();
	}

	private async checkListener(): Promise<void> {
		const l = this.listening;
		if (l && !(await l.check().catch(() => false)) && this.listening === l) this.lost();
	}
}

/** One cache per database per process, shared by its stores; closed when the last store lets it go. */
const caches = new WeakMap<Relational, { cache: DocCache; users: number }>();

export function acquireDocCache(rel: Relational, size = DOC_CACHE_SIZE): DocCache {
	let e = caches.get(rel);
	if (!e) caches.set(rel, (e = { cache: new DocCache(rel, size), users: 0 }));
	e.users++;
	return e.cache;
}

export function releaseDocCache(rel: Relational): void {
	const e = caches.get(rel);
	if (!e || --e.users > 0) return;
	caches.delete(rel);
	e.cache.close();
}
