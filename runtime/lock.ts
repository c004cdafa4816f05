/**
 * Short leases on the platform cache (runtime/kv.ts `setIfAbsent` with a TTL): one holder at a time across every node
 * that shares the cache (Redis in production, the process in the embedded default). A holder that dies frees the
 * lease when its TTL runs out; a long holder renews it. Release and renewal only touch a lease still held by the
 * same token (atomically on Redis, by compare-then-act in memory, where one process is the only user).
 */
import { randomBytes } from "crypto";
import { RedisKeyValue, type KeyValue } from "./kv";

export interface Lease {
	readonly key: string;
	readonly token: string;
	/** Extends the TTL; false when the lease was lost (expired and taken by someone else). */
	renew(): Promise<boolean>;
	release(): Promise<void>;
}

const RELEASE_LUA = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`;
const RENEW_LUA = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`;

type RedisLike = { eval(script: string, numKeys: number, ...args: Array<string | number>): Promise<unknown> };

/** The cache's script call, so an outage is a CacheUnavailableError here too. */
function redisOf(kv: KeyValue): RedisLike | undefined {
	if (!(kv instanceof RedisKeyValue)) return undefined;
	return { eval: (script, numKeys, ...args) => kv.eval(script, args.slice(0, numKeys).map(String), args.slice(numKeys)) };
}

/** Takes the lease when nobody holds it; null otherwise. */
export async function tryLease(kv: KeyValue, key: string, ttlMs: number): Promise<Lease | null> {
	const token = randomBytes(12).toString("base64url");
	if (!(await kv.setIfAbsent(key, token, ttlMs))) return null;
	const redis = redisOf(kv);
	return {
		key,
		token,
		async renew() {
			if (redis) return Number(await redis.eval(RENEW_LUA, 1, key, token, Math.round(ttlMs))) === 1;
			if ((await kv.get(key)) !== token) return false;
			await kv.set(key, token, ttlMs);
			return true;
		},
		async release() {
			if (redis) await redis.eval(RELEASE_LUA, 1, key, token);
			else if ((await kv.get(key)) === token) await kv.del(key);
		},
	};
}

/** Waits up to `waitMs` for the lease (short randomized polls), runs `fn`, releases; throws when it never came. */
export async function withLease<T>(kv: KeyValue, key: string, ttlMs: number, waitMs: number, fn: () => Promise<T>): Promise<T> {
	const until = Date.now() + waitMs;
	for (;;) {
		const lease = await tryLease(kv, key, ttlMs);
		if (lease) {
			try {
				return await fn();
			} finally {
				await lease.release().catch(() => undefined);
			}
		}
		if (Date.now() >= until) throw new Error(`lock ${key} is busy`);
		await new Promise((r) => setTimeout(r, 5 + Math.floor(Math.random() * 20)));
	}
}

/** Releases a lease taken by another call (its token passed along), only if still held by that token. */
export async function releaseLease(kv: KeyValue, key: string, token: string): Promise<void> {
	const redis = redisOf(kv);
	if (redis) await redis.eval(RELEASE_LUA, 1, key, token);
	else if ((await kv.get(key)) === token) await kv.del(key);
}

/** Renews a lease taken by another call; false when it is no longer held by that token. */
export async function renewLease(kv: KeyValue, key: string, token: string, ttlMs: number): Promise<boolean> {
	const redis = redisOf(kv);
	if (redis) return Number(await redis.eval(RENEW_LUA, 1, key, token, Math.round(ttlMs))) === 1;
	if ((await kv.get(key)) !== token) return false;
	await kv.set(key, token, ttlMs);
	return true;
}
