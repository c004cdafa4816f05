/**
 * The Redis cache while its server is away (a redis-server of this test's own, killed and started again): every
 * call fails fast with CacheUnavailableError (a 503 with Retry-After at the gateway), never ioredis's own errors
 * after 20 retries, and the same client works again once the server is back, without being recreated.
 */
import { CacheUnavailableError, isCacheUnavailable, RedisKeyValue } from "../../runtime/kv";
import { toErrorBody, retryAfterOf } from "../../lib/errors";
import { tryLease } from "../../runtime/lock";
import { needServerBinaries, ownRedis, type OwnServer } from "../helpers/servers";

const binaries = needServerBinaries();
import { eventually } from "../helpers/wait";

jest.setTimeout(60_000);

let redis: OwnServer;
let kv: RedisKeyValue;

beforeAll(async () => {
	if (!binaries.up) return;
	redis = await ownRedis();
	kv = new RedisKeyValue(redis.url, "kv-outage:");
});

afterAll(async () => {
	await kv?.close();
	await redis?.close();
});

/** The rejection of `p` and how long it took. */
async function failure(p: Promise<unknown>): Promise<{ err: unknown; ms: number }> {
	const t = Date.now();
	try {
		await p;
	} catch (err) {
		return { err, ms: Date.now() - t };
	}
	throw new Error("the call succeeded while the cache was down");
}

binaries.test("every call fails fast with CacheUnavailableError while Redis is down, and works again once it is back", async () => {
	await kv.set("k", "v", 60_000);
	expect(await kv.get("k")).toBe("v");
	await redis.stop();
	const calls: Array<[string, () => Promise<unknown>]> = [
		["get", () => kv.get("k")],
		["set", () => kv.set("k", "w", 1000)],
		["take", () => kv.take("k")],
		["del", () => kv.del("k")],
		["incr", () => kv.incr("n", 1000)],
		["setIfAbsent", () => kv.setIfAbsent("l", "x", 1000)],
		["rateTake", () => kv.rateTake("r", 1, 1)],
		["lease", () => tryLease(kv, "lease", 1000)],
	];
	for (const [name, call] of calls) {
		const { err, ms } = await failure(call());
		expect([name, err]).toEqual([name, expect.any(CacheUnavailableError)]);
		expect(isCacheUnavailable(err)).toBe(true);
		// One failed reconnect (≤ 1 s apart) or the command timeout (2 s), not ioredis's 20 retries.
		expect(ms).toBeLessThan(3000);
		expect(toErrorBody(err)).toEqual({ statusCode: 503, message: "service unavailable", error: "Service Unavailable" });
		expect(retryAfterOf(err, 503)).toBe(2);
	}
	expect(await kv.ping()).toBe(false);
	await redis.start();
	// The same client reconnects by itself (retries every ≤ 1 s); the restarted server is empty (no persistence).
	expect(
		await eventually(
			() => kv.ping(),
			(ok) => ok,
			5000,
		),
	).toBe(true);
	expect(await kv.get("k")).toBeNull();
	expect(await kv.incr("n", 10_000)).toBe(1);
});

binaries.test("a server that stops answering (SIGSTOP) times out a call after 2 s instead of hanging", async () => {
	redis.pause!();
	try {
		const { err, ms } = await failure(kv.get("k"));
		expect(err).toBeInstanceOf(CacheUnavailableError);
		expect(ms).toBeGreaterThanOrEqual(1900);
		expect(ms).toBeLessThan(3500);
	} finally {
		redis.resume!();
	}
	expect(
		await eventually(
			() =>
				kv.get("k").then(
					() => true,
					() => false,
				),
			(ok) => ok,
			5000,
		),
	).toBe(true);
});

binaries.test("a wrong command is not an outage: Redis's reply error stays as it is (a bug answers 500)", async () => {
	await kv.set("str", "x", 10_000);
	const { err } = await failure(kv.eval("return redis.call('incr', KEYS[1])", ["str"], []));
	expect(isCacheUnavailable(err)).toBe(false);
	expect(toErrorBody(err).statusCode).toBe(500);
});
