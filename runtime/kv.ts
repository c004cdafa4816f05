/**
 * The platform cache: a small keyed store with TTLs and counters, in-process by default and Redis (REDIS_URL) in
 * production, so that blacklists, APT records, login counters and one-time codes are shared by every node.
 */
import { chmodSync, readFileSync, renameSync, writeFileSync } from "fs";
import type Redis from "ioredis";
import { lazy } from "../lib/lazy";
import { ApiError } from "../lib/errors";
import { withTimeout } from "./health";

/** Seconds a client is told to wait (Retry-After) when the cache cannot answer: ioredis reconnects within that. */
export const CACHE_RETRY_AFTER_S = 2;

/**
 * The cache could not answer (Redis down, unreachable, loading, or silent for 2 s). A 503
 * for the client, with Retry-After; callers that can decide without the cache catch it (see `isCacheUnavailable`).
 * Its name and data cross the transporter, so the gateway maps it whichever node raised it.
 */
export class CacheUnavailableError extends ApiError {
	constructor(readonly reason: string) {
		super(503, "service unavailable");
		this.name = "CacheUnavailableError";
		this.data = { retryAfter: CACHE_RETRY_AFTER_S };
	}
}

export const isCacheUnavailable = (err: unknown): boolean => (err as { name?: unknown })?.name === "CacheUnavailableError";

/** The Redis client, loaded by the first RedisKeyValue (REDIS_URL): a node without Redis never compiles it. */
const ioredis = lazy(() => require("ioredis") as typeof import("ioredis"));

/** Redis answers that mean "not now" rather than "wrong command": an outage, not a bug. */
const TRANSIENT_REPLY = /^(LOADING|BUSY|MASTERDOWN|TRYAGAIN|CLUSTERDOWN|READONLY)\b/;

/** Connection-level failures become CacheUnavailableError; a reply error of a wrong command stays what it is. */
function unavailable(err: unknown): never {
	const e = err as Error;
	if (e instanceof ioredis().ReplyError && !TRANSIENT_REPLY.test(e.message)) throw e;
	throw new CacheUnavailableError(e?.message ?? String(err));
}

/**
 * Fail fast while Redis is away, reconnect by itself: a command waits at most `commandTimeout` (also while queued
 * during a reconnect) and is dropped after one failed reconnect, instead of the 20 attempts of ioredis's default;
 * reconnects go on forever, 100 ms apart growing to 1 s. The timeout leaves room for an event loop that was busy
 * (its timers run before the reply that arrived meanwhile is read): 2 s, not the few ms Redis needs.
 *
 * A connection that goes silent (a partition without resets: nothing closes it) is given up: a command sent on it that
 * gets no byte back within `socketTimeout` destroys the socket, and ioredis connects again. Without it each command
 * times out and the dead socket stays for good (no command ever reconnects it). Idle connections carry TCP keepalive.
 * Never used for blocking commands (none on this client).
 */
export const REDIS_OPTIONS = {
	lazyConnect: false,
	enableOfflineQueue: true,
	maxRetriesPerRequest: 1,
	connectTimeout: 2000,
	commandTimeout: 2000,
	socketTimeout: 2000,
	keepAlive: 10_000,
	retryStrategy: (times: number) => Math.min(100 * times, 1000),
} as const;

/** How long the health check waits for Redis's PONG. */
const PING_TIMEOUT_MS = 1000;

/**
 * Keys of the embedded cache that outlive a restart (see MemoryKeyValue.persistTo): the login failure counters.
 * Revocations need no copy here (the session in identity/sessions is their record); leases must not survive
 * the process that held them.
 */
export const PERSISTED_PREFIXES = ["auth:fail:"];
const PERSIST_DEBOUNCE_MS = 200;
/** The most keys one `keys` call answers. */
const KEYS_MAX = 10_000;
const persisted = (key: string) => PERSISTED_PREFIXES.some((p) => key.startsWith(p));

export interface KeyValue {
	readonly kind: "memory" | "redis";
	get(key: string): Promise<string | null>;
	set(key: string, value: string, ttlMs?: number): Promise<void>;
	/** Reads and deletes in one step (single-use values such as authorization codes). */
	take(key: string): Promise<string | null>;
	del(key: string): Promise<void>;
	/** Increments and (re)sets the TTL; returns the new value. */
	incr(key: string, ttlMs: number): Promise<number>;
	/** Sets only if absent; true when this call set it (locks). */
	setIfAbsent(key: string, value: string, ttlMs: number): Promise<boolean>;
	/**
	 * Token bucket (GCRA): takes one token of the bucket `key` that refills `rate` tokens a second up to `burst`.
	 * Returns 0 when taken, else the milliseconds until one is available (nothing taken). Atomic on Redis (one
	 * script, Redis's clock), so every node shares one bucket.
	 */
	rateTake(key: string, rate: number, burst: number): Promise<number>;
	/**
	 * The live keys that start with `prefix` and end with `suffix`, at most `max` of them, in no order. A scan of the
	 * whole store (SCAN on Redis, never KEYS): for operators' listings, not for request paths.
	 */
	keys(prefix: string, suffix?: string, max?: number): Promise<string[]>;
	ping(): Promise<boolean>;
	close(): Promise<void>;
}

export class MemoryKeyValue implements KeyValue {
	readonly kind = "memory" as const;
	private map = new Map<string, { v: string; exp: number }>();
	private sweeper = setInterval(() => this.sweep(), 60_000).unref();
	private file?: string;
	private timer?: NodeJS.Timeout;

	/**
	 * Keeps the entries under PERSISTED_PREFIXES that have a TTL in `file` (mode 0600): loaded now (expired ones
	 * dropped), written after a change (debounced) and at close. Once per instance.
	 */
	persistTo(file: string): void {
		if (this.file) return;
		this.file = file;
		let saved: Record<string, { v: string; exp: number }> = {};
		try {
			saved = JSON.parse(readFileSync(file, "utf8"));
		} catch {
			/* none yet, or unreadable: start empty */
		}
		const now = Date.now();
		for (const [k, e] of Object.entries(saved ?? {}))
			if (persisted(k) && e && typeof e.v === "string" && typeof e.exp === "number" && e.exp > now && !this.map.has(k)) this.map.set(k, { v: e.v, exp: e.exp });
	}

	private changed(key: string) {
		if (!this.file || !persisted(key) || this.timer) return;
		this.timer = setTimeout(() => {
			this.timer = undefined;
			this.flush();
		}, PERSIST_DEBOUNCE_MS).unref();
	}

	private flush() {
		if (!this.file) return;
		const now = Date.now();
		const out: Record<string, { v: string; exp: number }> = {};
		for (const [k, e] of this.map) if (persisted(k) && e.exp > now) out[k] = e;
		const tmp = `${this.file}.tmp`;
		try {
			writeFileSync(tmp, JSON.stringify(out), { mode: 0o600 });
			chmodSync(tmp, 0o600);
			renameSync(tmp, this.file);
		} catch (err) {
			process.emitWarning(`cache state could not be written to ${this.file}: ${(err as Error).message}`);
		}
	}

	private live(key: string) {
		const e = this.map.get(key);
		if (e && e.exp && e.exp <= Date.now()) {
			this.map.delete(key);
			return undefined;
		}
		return e;
	}

	private sweep() {
		const now = Date.now();
		for (const [k, e] of this.map) if (e.exp && e.exp <= now) this.map.delete(k);
	}

	async get(key: string) {
		return this.live(key)?.v ?? null;
	}
	async set(key: string, value: string, ttlMs?: number) {
		this.map.set(key, { v: value, exp: ttlMs ? Date.now() + ttlMs : 0 });
		this.changed(key);
	}
	async take(key: string) {
		const v = this.live(key)?.v ?? null;
		this.map.delete(key);
		this.changed(key);
		return v;
	}
	async del(key: string) {
		this.map.delete(key);
		this.changed(key);
	}
	async incr(key: string, ttlMs: number) {
		const n = Number(this.live(key)?.v ?? 0) + 1;
		this.map.set(key, { v: String(n), exp: Date.now() + ttlMs });
		this.changed(key);
		return n;
	}
	async setIfAbsent(key: string, value: string, ttlMs: number) {
		if (this.live(key)) return false;
		await this.set(key, value, ttlMs);
		return true;
	}
	async rateTake(key: string, rate: number, burst: number) {
		return gcra(this, key, rate, burst, Date.now() * 1000);
	}
	async keys(prefix: string, suffix = "", max = KEYS_MAX) {
		const out: string[] = [];
		for (const k of this.map.keys()) {
			if (out.length >= max) break;
			if (k.startsWith(prefix) && k.endsWith(suffix) && this.live(k)) out.push(k);
		}
		return out;
	}
	/** The bucket's theoretical arrival time (µs), kept as a value with a TTL like any other entry. */
	tat(key: string): number | undefined {
		const v = this.live(key)?.v;
		return v === undefined ? undefined : Number(v);
	}
	async ping() {
		return true;
	}
	async close() {
		clearInterval(this.sweeper);
		if (this.timer) clearTimeout(this.timer);
		this.timer = undefined;
		this.flush();
		this.file = undefined;
	}
}

/**
 * GCRA: each request moves the bucket's theoretical arrival time (TAT) on by one interval (1/rate); a request is
 * refused when that would put the TAT more than `burst` intervals ahead of now. Same arithmetic as RATE_SCRIPT.
 */
function gcra(kv: MemoryKeyValue, key: string, rate: number, burst: number, nowUs: number): number {
	const interval = 1e6 / rate;
	const tat = Math.max(kv.tat(key) ?? nowUs, nowUs);
	const next = tat + interval;
	const over = next - nowUs - burst * interval;
	if (over > 0) return Math.ceil(over / 1000);
	void kv.set(key, String(next), Math.ceil((next - nowUs) / 1000) + 1);
	return 0;
}

const RATE_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local nxt = tat + interval
local over = nxt - now - burst * interval
if over > 0 then return math.ceil(over / 1000) end
redis.call('SET', KEYS[1], string.format('%.0f', nxt), 'PX', math.ceil((nxt - now) / 1000) + 1)
return 0
`;

export class RedisKeyValue implements KeyValue {
	readonly kind = "redis" as const;
	readonly client: Redis;

	/** `prefix` (REDIS_PREFIX) is put before every key, so deployments or test runs sharing one Redis never meet. */
	constructor(url: string, prefix?: string) {
		this.client = new (ioredis().default)(url, { ...REDIS_OPTIONS, ...(prefix ? { keyPrefix: prefix } : {}) });
		// Connection errors surface through ping() and /status; ioredis keeps reconnecting.
		this.client.on("error", () => undefined);
	}

	get(key: string) {
		return this.client.get(key).catch(unavailable);
	}
	async set(key: string, value: string, ttlMs?: number) {
		if (ttlMs) await this.client.set(key, value, "PX", Math.max(1, Math.round(ttlMs))).catch(unavailable);
		else await this.client.set(key, value).catch(unavailable);
	}
	take(key: string) {
		return this.client.getdel(key).catch(unavailable);
	}
	async del(key: string) {
		await this.client.del(key).catch(unavailable);
	}
	async incr(key: string, ttlMs: number) {
		const res = await this.client.multi().incr(key).pexpire(key, Math.round(ttlMs)).exec().catch(unavailable);
		// exec answers null when the transaction was discarded (the connection dropped between MULTI and EXEC).
		if (!res) throw new CacheUnavailableError("transaction discarded");
		const [[err, n]] = res as [[Error | null, number]];
		if (err) unavailable(err);
		return n;
	}
	async setIfAbsent(key: string, value: string, ttlMs: number) {
		return (await this.client.set(key, value, "PX", Math.round(ttlMs), "NX").catch(unavailable)) === "OK";
	}
	async rateTake(key: string, rate: number, burst: number) {
		return Number(await this.eval(RATE_SCRIPT, [key], [String(1e6 / rate), String(burst)]));
	}
	async keys(prefix: string, suffix = "", max = KEYS_MAX) {
		// SCAN's pattern is not prefixed by ioredis (nor are the keys it answers): REDIS_PREFIX is added and removed here.
		const own = this.client.options.keyPrefix ?? "";
		const glob = (v: string) => v.replace(/[*?[\]\\]/g, "\\$&");
		const out = new Set<string>();
		let cursor = "0";
		try {
			do {
				const [next, found] = await this.client.scan(cursor, "MATCH", `${glob(own + prefix)}*${glob(suffix)}`, "COUNT", 1000);
				cursor = next;
				for (const k of found) if (out.size < max) out.add(k.slice(own.length));
			} while (cursor !== "0" && out.size < max);
		} catch (err) {
			unavailable(err);
		}
		return [...out];
	}
	/** A Lua script on `keys` (prefixed like every key), with the same outage mapping as the other calls. */
	eval(script: string, keys: string[], args: Array<string | number>): Promise<unknown> {
		return this.client.eval(script, keys.length, ...keys, ...args).catch(unavailable);
	}
	/**
	 * False at once while the client is between connections (it knows Redis is away: a check must not wait on the
	 * reconnect), and when Redis has not answered within PING_TIMEOUT_MS.
	 */
	async ping() {
		if (["reconnecting", "close", "end"].includes(this.client.status)) return false;
		try {
			return (await withTimeout(this.client.ping(), PING_TIMEOUT_MS)) === "PONG";
		} catch {
			return false;
		}
	}
	async close() {
		this.client.disconnect();
	}
}

const shared = new Map<string, KeyValue>();

/** One cache client per process, location and key prefix. */
export function sharedKeyValue(redisUrl?: string, prefix?: string): KeyValue {
	const key = redisUrl ? `${redisUrl} ${prefix ?? ""}` : "memory";
	let kv = shared.get(key);
	if (!kv) shared.set(key, (kv = redisUrl ? new RedisKeyValue(redisUrl, prefix) : new MemoryKeyValue()));
	return kv;
}

export async function closeSharedKeyValues(): Promise<void> {
	for (const kv of shared.values()) await kv.close();
	shared.clear();
}
