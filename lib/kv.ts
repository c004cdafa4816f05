/**
 * The platform cache: a small keyed store with TTLs and counters, in-process by default and Redis (REDIS_URL) in
 * production, so that blacklists, APT records, login counters and one-time codes are shared by every node.
 */
import Redis from "ioredis";

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
	ping(): Promise<boolean>;
	close(): Promise<void>;
}

export class MemoryKeyValue implements KeyValue {
	readonly kind = "memory" as const;
	private map = new Map<string, { v: string; exp: number }>();
	private sweeper = setInterval(() => this.sweep(), 60_000).unref();

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
	}
	async take(key: string) {
		const v = this.live(key)?.v ?? null;
		this.map.delete(key);
		return v;
	}
	async del(key: string) {
		this.map.delete(key);
	}
	async incr(key: string, ttlMs: number) {
		const n = Number(this.live(key)?.v ?? 0) + 1;
		this.map.set(key, { v: String(n), exp: Date.now() + ttlMs });
		return n;
	}
	async setIfAbsent(key: string, value: string, ttlMs: number) {
		if (this.live(key)) return false;
		await this.set(key, value, ttlMs);
		return true;
	}
	async ping() {
		return true;
	}
	async close() {
		clearInterval(this.sweeper);
	}
}

export class RedisKeyValue implements KeyValue {
	readonly kind = "redis" as const;
	readonly client: Redis;

	/** `prefix` (REDIS_PREFIX) is put before every key, so deployments or test runs sharing one Redis never meet. */
	constructor(url: string, prefix?: string) {
		this.client = new Redis(url, { lazyConnect: false, maxRetriesPerRequest: 2, enableOfflineQueue: true, ...(prefix ? { keyPrefix: prefix } : {}) });
		// Connection errors surface through ping() and /status; ioredis keeps reconnecting.
		this.client.on("error", () => undefined);
	}

	get(key: string) {
		return this.client.get(key);
	}
	async set(key: string, value: string, ttlMs?: number) {
		if (ttlMs) await this.client.set(key, value, "PX", Math.max(1, Math.round(ttlMs)));
		else await this.client.set(key, value);
	}
	take(key: string) {
		return this.client.getdel(key);
	}
	async del(key: string) {
		await this.client.del(key);
	}
	async incr(key: string, ttlMs: number) {
		const [[, n]] = (await this.client.multi().incr(key).pexpire(key, Math.round(ttlMs)).exec()) as [[unknown, number]];
		return n;
	}
	async setIfAbsent(key: string, value: string, ttlMs: number) {
		return (await this.client.set(key, value, "PX", Math.round(ttlMs), "NX")) === "OK";
	}
	async ping() {
		try {
			return (await this.client.ping()) === "PONG";
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
