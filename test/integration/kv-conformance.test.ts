/**
 * One conformance suite for every KeyValue implementation: the in-process store and Redis (skipped with a
 * message when Redis does not answer on 6379, failing under REQUIRE_SERVERS=1). Both must behave the same,
 * because blacklists, APT records, login counters and one-time codes move between them with the deployment.
 */
import { randomBytes } from "crypto";
import Redis from "ioredis";
import { MemoryKeyValue, RedisKeyValue, sharedKeyValue, closeSharedKeyValues, type KeyValue } from "../../runtime/kv";
import { needServers } from "../helpers/platform";

const REDIS_URL = "redis://127.0.0.1:6379";
import { sleep } from "../helpers/wait";

interface Impl {
	name: string;
	available(): Promise<boolean>;
	make(prefix: string): KeyValue;
	/** Removes what a run left behind (keys written without a TTL). */
	cleanup(prefix: string): Promise<void>;
}

async function dropPrefix(prefix: string): Promise<void> {
	const raw = new Redis(REDIS_URL);
	try {
		const keys = await raw.keys(`${prefix}*`);
		if (keys.length) await raw.del(...keys);
	} finally {
		raw.disconnect();
	}
}

/** Redis, for its implementation's tests: decided when the file loads, so jest reports them as skipped without it. */
const redis = needServers(["Redis", 6379]);

const impls: Impl[] = [
	{ name: "MemoryKeyValue", available: async () => true, make: () => new MemoryKeyValue(), cleanup: async () => undefined },
	{ name: "RedisKeyValue", available: async () => redis.up, make: (prefix) => new RedisKeyValue(REDIS_URL, prefix), cleanup: dropPrefix },
];

describe.each(impls)("$name", (impl) => {
	let kv: KeyValue;
	let up = false;
	// Every run writes under its own prefix: runs in parallel (or leftovers of a crashed run) never meet.
	const prefix = `kvtest:${randomBytes(6).toString("hex")}:`;
	const it = impl.name === "RedisKeyValue" ? redis.test : test;
	const when = (name: string, fn: () => Promise<void>, timeout?: number) => it(name, fn, timeout);

	beforeAll(async () => {
		up = await impl.available();
		if (up) kv = impl.make(prefix);
	});
	afterAll(async () => {
		await kv?.close();
		if (up) await impl.cleanup(prefix);
	});

	when("get of a missing key is null; set then get returns the value", async () => {
		expect(await kv.get("missing")).toBeNull();
		await kv.set("a", "1");
		expect(await kv.get("a")).toBe("1");
		await kv.set("a", "two");
		expect(await kv.get("a")).toBe("two");
	});

	when("values are kept as exact strings (unicode, JSON, empty)", async () => {
		const v = JSON.stringify({ x: "é€😀", n: [1, 2] });
		await kv.set("json", v);
		expect(await kv.get("json")).toBe(v);
		await kv.set("empty", "");
		expect(await kv.get("empty")).toBe("");
	});

	when("a TTL expires the value; no TTL keeps it; set without TTL clears an earlier TTL", async () => {
		await kv.set("short", "x", 80);
		await kv.set("long", "y");
		await kv.set("was-short", "z", 80);
		await kv.set("was-short", "z2");
		expect(await kv.get("short")).toBe("x");
		await sleep(200);
		expect(await kv.get("short")).toBeNull();
		expect(await kv.get("long")).toBe("y");
		expect(await kv.get("was-short")).toBe("z2");
	});

	when("take reads and deletes in one step (single use), also under concurrency", async () => {
		await kv.set("code", "secret", 10_000);
		expect(await kv.take("code")).toBe("secret");
		expect(await kv.take("code")).toBeNull();
		expect(await kv.get("code")).toBeNull();
		await kv.set("race", "once", 10_000);
		const got = await Promise.all(Array.from({ length: 10 }, () => kv.take("race")));
		expect(got.filter((v) => v === "once")).toHaveLength(1);
		expect(got.filter((v) => v === null)).toHaveLength(9);
	});

	when("take of an expired value is null", async () => {
		await kv.set("gone", "v", 50);
		await sleep(120);
		expect(await kv.take("gone")).toBeNull();
	});

	when("del removes a key; deleting a missing key is fine", async () => {
		await kv.set("d", "v");
		await kv.del("d");
		expect(await kv.get("d")).toBeNull();
		await expect(kv.del("never-there")).resolves.toBeUndefined();
	});

	when("incr counts from 1, atomically, and every increment resets the TTL", async () => {
		expect(await kv.incr("n", 10_000)).toBe(1);
		expect(await kv.incr("n", 10_000)).toBe(2);
		const all = await Promise.all(Array.from({ length: 20 }, () => kv.incr("n", 10_000)));
		expect(new Set(all).size).toBe(20);
		expect(Math.max(...all)).toBe(22);
		expect(await kv.get("n")).toBe("22");

		// The window slides: each failure keeps the counter alive for another full TTL.
		expect(await kv.incr("w", 300)).toBe(1);
		await sleep(200);
		expect(await kv.incr("w", 300)).toBe(2); // resets the TTL to 300 ms from now
		await sleep(200); // 400 ms after the first increment: would have expired without the reset
		expect(await kv.get("w")).toBe("2");
		await sleep(250);
		expect(await kv.get("w")).toBeNull();
		expect(await kv.incr("w", 300)).toBe(1); // starts over after expiry
	});

	when("setIfAbsent is a lock: one winner, held until its TTL or a del", async () => {
		const results = await Promise.all(Array.from({ length: 10 }, (_, i) => kv.setIfAbsent("lock", `owner-${i}`, 150)));
		expect(results.filter(Boolean)).toHaveLength(1);
		const winner = `owner-${results.indexOf(true)}`;
		expect(await kv.get("lock")).toBe(winner);
		expect(await kv.setIfAbsent("lock", "late", 150)).toBe(false);
		expect(await kv.get("lock")).toBe(winner);
		await sleep(250);
		expect(await kv.setIfAbsent("lock", "after-expiry", 10_000)).toBe(true);
		expect(await kv.get("lock")).toBe("after-expiry");
		await kv.del("lock");
		expect(await kv.setIfAbsent("lock", "after-del", 10_000)).toBe(true);
	});

	when("setIfAbsent does not overwrite a value set without TTL", async () => {
		await kv.set("plain", "kept");
		expect(await kv.setIfAbsent("plain", "other", 1000)).toBe(false);
		expect(await kv.get("plain")).toBe("kept");
	});

	when("ping answers true", async () => {
		expect(await kv.ping()).toBe(true);
	});

	when("keys lists the live keys of a prefix and suffix, without REDIS_PREFIX, glob characters taken literally", async () => {
		await kv.set("list:a:until", "1", 10_000);
		await kv.set("list:b:until", "1", 10_000);
		await kv.set("list:b", "2", 10_000);
		await kv.set("list:gone:until", "1", 1);
		await kv.set("listing:c:until", "1", 10_000);
		await kv.set("list*:d:until", "1", 10_000);
		await sleep(20);
		expect((await kv.keys("list:", ":until")).sort()).toEqual(["list:a:until", "list:b:until"]);
		expect((await kv.keys("list:")).sort()).toEqual(["list:a:until", "list:b", "list:b:until"]);
		expect(await kv.keys("list*:")).toEqual(["list*:d:until"]);
		expect(await kv.keys("list:", ":until", 1)).toHaveLength(1);
		expect(await kv.keys("nothing:")).toEqual([]);
	});

	when("keys of different instances: shared within one location, separate across prefixes", async () => {
		if (impl.name === "MemoryKeyValue") {
			// Each in-process store is its own space.
			const other = new MemoryKeyValue();
			await kv.set("space", "mine");
			expect(await other.get("space")).toBeNull();
			await other.close();
			return;
		}
		const same = impl.make(prefix);
		const other = impl.make(`${prefix}other:`);
		try {
			await kv.set("space", "mine");
			expect(await same.get("space")).toBe("mine");
			expect(await other.get("space")).toBeNull();
		} finally {
			await same.close();
			await other.close();
		}
	});
});

describe("RedisKeyValue specifics", () => {
	redis.test("REDIS_PREFIX puts every key under the prefix (raw Redis sees only prefixed keys)", async () => {
		const prefix = `kvtest:${randomBytes(6).toString("hex")}:`;
		const kv = new RedisKeyValue(REDIS_URL, prefix);
		const raw = new Redis(REDIS_URL);
		try {
			await kv.set("auth:fail:127.0.0.1", "1", 10_000);
			await kv.incr("counter", 10_000);
			await kv.setIfAbsent("lock", "x", 10_000);
			await kv.set("single", "y", 10_000);
			expect(await kv.take("single")).toBe("y");
			const keys = (await raw.keys(`${prefix}*`)).sort();
			expect(keys).toEqual([`${prefix}auth:fail:127.0.0.1`, `${prefix}counter`, `${prefix}lock`]);
			expect(await raw.get("auth:fail:127.0.0.1")).toBeNull();
			expect(await raw.pttl(`${prefix}counter`)).toBeGreaterThan(0);
			await raw.del(...keys);
		} finally {
			await kv.close();
			raw.disconnect();
		}
	});

	test("ping answers false (not an exception) when Redis is unreachable", async () => {
		const kv = new RedisKeyValue("redis://127.0.0.1:1");
		try {
			expect(await kv.ping()).toBe(false);
		} finally {
			await kv.close();
		}
	});

	test("sharedKeyValue keeps one client per location and prefix", async () => {
		try {
			expect(sharedKeyValue()).toBe(sharedKeyValue());
			expect(sharedKeyValue().kind).toBe("memory");
			const a = sharedKeyValue(REDIS_URL, "p1:");
			expect(sharedKeyValue(REDIS_URL, "p1:")).toBe(a);
			expect(sharedKeyValue(REDIS_URL, "p2:")).not.toBe(a);
			expect(a.kind).toBe("redis");
		} finally {
			await closeSharedKeyValues();
		}
	});
});
