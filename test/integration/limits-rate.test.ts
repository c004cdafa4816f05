/**
 * RATE_LIMIT (docs/contracts.md "Limits the platform keeps"): per principal, and per IP for unauthenticated requests,
 * when the operator sets it (off by default); 429 `too many requests` with Retry-After (seconds); one token
 * bucket per principal/IP in the shared cache (runtime/kv rateTake), so every gateway agrees.
 */
import { randomBytes } from "crypto";
import { rmSync } from "fs";
import { bootPlatform, needServers, siblingDataDir, type TestPlatform } from "../helpers/platform";
import { errorBody, sleep } from "../helpers/auth";
import { otherPrincipals } from "../helpers/stall";
import { describeProbe, expectStatusHeldUnder, startStatusProbe, withStatusProbe } from "../helpers/status-probe";
import { startPlatform, type Platform } from "../../platform";
import { MemoryKeyValue, RedisKeyValue, type KeyValue } from "../../runtime/kv";
import { rateLimit, readConfig } from "../../runtime/config";

const LIMITED = errorBody(429, "too many requests");

describe("RATE_LIMIT setting", () => {
	test("parses <n>/s[,<burst>] (and /m, /h); off when unset or `off`", () => {
		expect(rateLimit("50/s,200")).toEqual({ rate: 50, burst: 200 });
		expect(rateLimit("50/s")).toEqual({ rate: 50, burst: 50 });
		expect(rateLimit(" 120/m , 10 ")).toEqual({ rate: 2, burst: 10 });
		expect(rateLimit("3600/h")).toEqual({ rate: 1, burst: 3600 });
		expect(rateLimit(undefined)).toBeUndefined();
		expect(rateLimit("off")).toBeUndefined();
	});

	test("a bad value refuses to start, naming the setting", () => {
		for (const bad of ["fast", "0/s", "-5/s", "50", "50/d", "50/s,0", "50/s,1.5", "50/s,", "/s"])
			expect(() => rateLimit(bad)).toThrow(`RATE_LIMIT must be <requests>/s (or /m, /h) with an optional ,<burst>, e.g. 50/s,200, got ${bad}`);
		const saved = process.env.RATE_LIMIT;
		process.env.RATE_LIMIT = "lots";
		try {
			expect(() => readConfig()).toThrow(/^RATE_LIMIT must be/);
		} finally {
			if (saved === undefined) delete process.env.RATE_LIMIT;
			else process.env.RATE_LIMIT = saved;
		}
	});
});

/** Redis, for its store's tests: decided when the file loads, so jest reports them as skipped without it. */
const redis = needServers(["Redis", 6379]);

describe.each([
	["memory", async () => true, () => new MemoryKeyValue()],
	["redis", async () => redis.up, () => new RedisKeyValue("redis://127.0.0.1:6379", `rate-test-${randomBytes(4).toString("hex")}:`)],
] as Array<[string, () => Promise<boolean>, () => KeyValue]>)("rateTake on %s", (name, _available, make) => {
	(name === "redis" ? redis.test : test)("a burst passes, then the wait until the next token; the bucket refills at the rate", async () => {
		const kv = make();
		try {
			const results: number[] = [];
			for (let i = 0; i < 6; i++) results.push(await kv.rateTake("b", 2, 5));
			expect(results.slice(0, 5)).toEqual([0, 0, 0, 0, 0]);
			expect(results[5]).toBeGreaterThan(300);
			expect(results[5]).toBeLessThanOrEqual(500);
			// Another key has its own bucket.
			expect(await kv.rateTake("other", 2, 5)).toBe(0);
			await sleep(results[5] + 20);
			expect(await kv.rateTake("b", 2, 5)).toBe(0);
			expect(await kv.rateTake("b", 2, 5)).toBeGreaterThan(0);
		} finally {
			await kv.close();
		}
	});
});

describe("on the gateway", () => {
	let p: TestPlatform;
	let token: string;
	let gwB: Platform | undefined;
	let dirB = "";
	/** When the root token's login (this IP's one unauthenticated request) had been counted. */
	let loggedInAt = 0;
	/** Three principals of their own (made before any test spends a bucket). */
	let others: string[] = [];

	beforeAll(async () => {
		// 30 a minute (one token every 2 s), bursts of 10: no refill can hide the limit within a test. Each test spends
		// a bucket of its own right before it checks it: a bucket spent in another test refills while the tests between
		// run (the 15 /status calls, a second gateway's start: more than the 2 s of a token).
		const id = randomBytes(4).toString("hex");
		p = await bootPlatform({ rateLimit: { rate: 0.5, burst: 10 }, transporter: "Fake", namespace: `rate-${id}`, nodeId: `a-${id}` });
		token = await p.rootToken();
		loggedInAt = Date.now();
		others = await otherPrincipals(p, token, 3);
		// Making them took 4 of root's 10 tokens: wait for its bucket to be full again (a token every 2 s).
		await sleep(4 * 2000 + 100);
	}, 60_000);
	afterAll(async () => {
		await gwB?.stop();
		if (dirB) rmSync(dirB, { recursive: true, force: true });
		await p?.cleanup();
	});
	withStatusProbe(() => p.url);

	test("per principal: 10 requests, then 429 with Retry-After; another principal has its own bucket", async () => {
		const codes: number[] = [];
		for (let i = 0; i < 10; i++) codes.push((await p.http("GET", "/content/notes", { token })).status);
		expect(codes).toEqual(Array(10).fill(200));
		const r = await p.http("GET", "/content/notes", { token });
		expect(r.status).toBe(429);
		expect(r.body).toEqual(LIMITED);
		expect(r.headers.get("retry-after")).toMatch(/^[12]$/);
		// Every route of the principal shares the bucket.
		expect((await p.http("GET", "/auth/verify", { token })).body).toEqual(LIMITED);
		expect((await p.http("GET", "/content/notes", { token: others[0] })).status).toBe(200);
		// /status and /metrics are never limited (health checks).
		for (let i = 0; i < 15; i++) expect((await p.http("GET", "/status")).status).toBe(200);
	});

	describe("a second gateway", () => {
		// Started before the test's probe: a node's start (in this process here) is no request.
		beforeAll(async () => {
			dirB = siblingDataDir(p.dataDir);
			gwB = await startPlatform({ ...p.cfg, dataDir: dirB, services: ["api"], nodeId: `b-${randomBytes(4).toString("hex")}`, port: 0 });
			await gwB.broker.waitForServices(["auth", "identity", "domain", "content"], 10_000);
		});
		test("on the same cache agrees", async () => {
			// A principal of its own: 10 requests at once, half on each gateway, then each refuses the 11th. (At once: a
			// token comes back every 2 s, which 10 requests one after the other on a loaded machine can reach.)
			const other = others[1];
			const onB = async (pth: string) => {
				const r = await fetch(`${gwB!.url}${pth}`, { headers: { authorization: `Bearer ${other}` } });
				return { status: r.status, body: await r.json() };
			};
			const onA = () => p.http("GET", "/content/notes", { token: other });
			const codes = await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 ? onB("/content/notes") : onA()).then((r) => r.status)));
			expect(codes).toEqual(Array(10).fill(200));
			expect(await onB("/content/notes")).toEqual({ status: 429, body: LIMITED });
			const a = await onA();
			expect({ status: a.status, body: a.body }).toEqual({ status: 429, body: LIMITED });
		});
	});

	test("unauthenticated requests count per IP: failed authentications and public routes alike", async () => {
		// The IP's bucket is full again 2 s after the root token's login (its only unauthenticated request so far).
		await sleep(Math.max(0, loggedInAt + 2000 + 50 - Date.now()));
		const login = () => p.http("POST", "/auth/token", { body: { grant_type: "password", client_id: p.root.client_id, username: p.root.username, password: p.root.password } });
		// At once: a login and 9 requests without a bearer (401) pass, then 429.
		const [first, ...codes] = await Promise.all([login(), ...Array.from({ length: 9 }, () => p.http("GET", "/content/notes"))].map((r) => r.then((x) => x.status)));
		expect(first).toBe(200);
		expect(codes).toEqual(Array(9).fill(401));
		const r = await p.http("GET", "/content/notes", { token: "garbage" });
		expect(r.status).toBe(429);
		expect(r.body).toEqual(LIMITED);
		expect(Number(r.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
		const pub = await login();
		expect(pub.status).toBe(429);
		expect(pub.body).toEqual(LIMITED);
		// An authenticated principal from the same IP has its own bucket.
		expect((await p.http("GET", "/content/notes", { token: others[2] })).status).toBe(200);
	});
});

test("off by default: no request is limited", async () => {
	const p = await bootPlatform();
	try {
		expect(p.cfg.rateLimit).toBeUndefined();
		const probe = startStatusProbe(p.url);
		const codes = await Promise.all(Array.from({ length: 60 }, () => p.http("GET", "/content/notes")));
		expect(codes.every((r) => r.status === 401)).toBe(true);
		console.log(`60 requests at once: ${describeProbe(await expectStatusHeldUnder(probe))}`);
	} finally {
		await p.cleanup();
	}
});
