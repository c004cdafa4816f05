/**
 * Each client of the platform against a connection that goes silent (test/helpers/silent-proxy.ts: a partition
 * without resets, the server reached through a proxy that holds the connections and forwards nothing). Asserted per
 * client: the silence is noticed within a bound (a statement, a command, a ping fails instead of waiting forever), the
 * server side lets go of what a silenced session held, and once the partition ends the client works again by itself.
 * The platform over all three, with its pipeline, /status and SIGTERM: test/e2e/silent-platform.test.ts.
 */
// jest-solo: a cluster of node processes of its own, stopped, killed or cut off on a schedule (test/run.mjs)
import { mkdtempSync, rmSync } from "fs";
import os from "os";
import path from "path";
import { ServiceBroker } from "moleculer";
import { needServers } from "../helpers/platform";
import { testDatabase, type TestDatabase } from "../helpers/pg";
import { silentProxy, type SilentProxy } from "../helpers/silent-proxy";
import { sleep } from "../helpers/wait";
import { openRelational, releaseRelational } from "../../runtime/relational";
import { isDependencyOutage } from "../../lib/errors";
import { isCacheUnavailable, RedisKeyValue } from "../../runtime/kv";
import { readConfig } from "../../runtime/config";
import { brokerOptions } from "../../moleculer.config";
import { TransportWatch } from "../../runtime/transport-watch";

const servers = needServers(["PostgreSQL", 5432], ["Redis", 6379], ["NATS", 4222]);

jest.setTimeout(60_000);

/** Milliseconds `p` took to settle, and how (a rejection is returned, not thrown). */
async function timed<T>(p: Promise<T>): Promise<{ ms: number; value?: T; error?: unknown }> {
	const t0 = Date.now();
	return p.then(
		(value) => ({ ms: Date.now() - t0, value }),
		(error) => ({ ms: Date.now() - t0, error }),
	);
}

/** Time until `fn` resolves truthy (tried every 100 ms), at most `ms`. */
async function until(what: string, fn: () => Promise<unknown>, ms: number): Promise<number> {
	const t0 = Date.now();
	for (;;) {
		if (await fn().catch(() => false)) return Date.now() - t0;
		if (Date.now() - t0 > ms) throw new Error(`${what}: not within ${ms} ms`);
		await sleep(100);
	}
}

servers.describe("PostgreSQL through a silent connection", () => {
	let db: TestDatabase;
	let proxy: SilentProxy;
	const dirs: string[] = [];
	const opened: Array<{ databaseUrl: string; dataDir: string }> = [];

	/** A pool of its own (openRelational shares one per URL): the test's name as application_name, and `params`. */
	function location(params = "") {
		const app = `application_name=silent-${opened.length}`;
		const cfg = { databaseUrl: `postgres://postgres@${proxy.address}/${db.name}?${app}${params ? `&${params}` : ""}`, dataDir: mkdtempSync(path.join(os.tmpdir(), "silent-pg-")) };
		dirs.push(cfg.dataDir);
		opened.push(cfg);
		return cfg;
	}
	const open = (params = "") => openRelational(location(params));

	beforeAll(async () => {
		db = (await testDatabase())!;
		proxy = await silentProxy(5432);
	});

	afterEach(() => proxy.restore());

	afterAll(async () => {
		proxy.restore();
		await Promise.all(opened.map((cfg) => releaseRelational(cfg).catch(() => undefined)));
		await proxy.close();
		await db.drop();
		for (const d of dirs) rmSync(d, { recursive: true, force: true });
	});

	test("every connection carries the server-side timeouts", async () => {
		const rel = await open();
		const { rows } = await rel.query<{ s: string; l: string; i: string }>(
			"select current_setting('statement_timeout') s, current_setting('lock_timeout') l, current_setting('idle_in_transaction_session_timeout') i",
		);
		expect(rows[0]).toEqual({ s: "30s", l: "10s", i: "30s" });
	});

	test("a statement on a silenced connection fails within its bound, and the row lock its session held is released", async () => {
		// The server-side limits short for the test (DATABASE_URL parameters take precedence); no query_timeout: the
		// client's bound is statement_timeout + 5 s.
		const rel = await open("statement_timeout=2000&lock_timeout=1000&idle_in_transaction_session_timeout=3000");
		await rel.query("create table counters (id int primary key, n int not null)");
		await rel.query("insert into counters values (1, 0)");
		// A session holding a row lock inside its transaction (the observer's stats bucket in the measured outage).
		const holder = await rel.client();
		await holder.query("begin");
		await holder.query("update counters set n = n + 1 where id = 1");
		// Only the connections open now go silent (the holder's); new ones reach the server.
		proxy.silence({ newConnections: false });
		const answer = timed(holder.query("select 1"));
		// Writers of the locked row fail after lock_timeout instead of queueing (each would hold a pooled connection).
		const waiting = await timed(rel.query("update counters set n = n + 10 where id = 1"));
		expect((waiting.error as { code?: string })?.code).toBe("55P03");
		expect(waiting.ms).toBeLessThan(4000);
		// The server ends the idle-in-transaction session after 3 s, which releases the lock: the write goes through.
		const released = await until("the row lock released", async () => (await rel.query("update counters set n = n + 10 where id = 1")).rowCount === 1, 15_000);
		const { rows } = await rel.query<{ n: number }>("select n from counters where id = 1");
		expect(rows[0].n).toBe(10);
		// The silenced statement fails (an outage: 503 for a request, a retry for a worker) instead of waiting forever.
		const r = await answer;
		expect(isDependencyOutage(r.error)).toBe(true);
		expect(String((r.error as Error).message)).toMatch(/^Connection terminated: PostgreSQL did not answer within 7000 ms/);
		expect(r.ms).toBeLessThan(12_000);
		holder.release();
		console.log(
			`PostgreSQL, one connection silenced: a writer of its locked row failed in ${waiting.ms} ms (55P03), went through ${released + waiting.ms} ms after the silence; the silenced statement failed after ${r.ms} ms`,
		);
	});

	test("a request's statement fails at its deadline, and so do a transaction's and a wait for a connection", async () => {
		const cfg = { ...location(), databasePoolSize: 2 };
		const rel = await openRelational(cfg);
		await Promise.all([rel.query("select 1"), rel.query("select 1")]);
		proxy.silence();
		// The server's limits are the defaults (answer 35 s): what bounds these is the deadline.
		const answer = await timed(rel.query("select 1", [], 1500));
		expect(isDependencyOutage(answer.error)).toBe(true);
		expect(String((answer.error as Error).message)).toBe("Connection terminated: no answer within 1500 ms (a request's deadline)");
		expect(answer.ms).toBeGreaterThanOrEqual(1400);
		expect(answer.ms).toBeLessThan(2500);
		// A transaction of a request: each statement under the deadline too.
		const tx = await timed(rel.transaction(async (q) => q("select 1"), undefined, 1000));
		expect(isDependencyOutage(tx.error)).toBe(true);
		expect(tx.ms).toBeLessThan(2000);
		// Both connections busy with statements without a deadline (a worker's): a request waits for one at most its deadline.
		const held = [rel.query("select 2"), rel.query("select 3")].map((p) => p.catch((err) => err));
		await sleep(100);
		const waited = await timed(rel.query("select 1", [], 1000));
		expect(isDependencyOutage(waited.error)).toBe(true);
		expect(String((waited.error as Error).message)).toBe("timeout exceeded when trying to connect: no connection within 1000 ms (a request's deadline)");
		expect(waited.ms).toBeLessThan(2000);
		proxy.restore();
		await releaseRelational(cfg);
		await Promise.all(held);
		console.log(
			`PostgreSQL silent: a request's statement failed after ${answer.ms} ms (deadline 1500 ms), a transaction's after ${tx.ms} ms and a wait for a connection after ${waited.ms} ms (1000 ms)`,
		);
	});

	test("the health check answers within its bound while the server is silent, and is true again once it is back", async () => {
		const rel = await open();
		expect(await rel.ping()).toBe(true);
		proxy.silence();
		const down = await timed(rel.ping());
		expect(down.value).toBe(false);
		expect(down.ms).toBeLessThan(2500);
		proxy.restore();
		// The connection silenced under the failed check was given up: the next checks reach the server on new ones.
		const back = await until("ping true again", () => rel.ping(), 10_000);
		console.log(`PostgreSQL silent: ping false after ${down.ms} ms; true again ${back} ms after the partition ended`);
	});

	test("closing the pool does not wait on a statement a silent server never answers", async () => {
		const cfg = location();
		const rel = await openRelational(cfg);
		await Promise.all([rel.query("select 1"), rel.query("select 1"), rel.query("select 1")]);
		proxy.silence();
		// A statement in flight at the stop (the relay's read, a request's write).
		const inFlight = timed(rel.query("select 1"));
		await sleep(200);
		const closed = await timed(releaseRelational(cfg));
		expect(closed.error).toBeUndefined();
		expect(closed.ms).toBeLessThan(5000);
		const statement = await inFlight;
		expect(isDependencyOutage(statement.error)).toBe(true);
		console.log(`PostgreSQL silent: pool closed in ${closed.ms} ms with a statement in flight (failed after ${statement.ms} ms)`);
	});
});

servers.describe("Redis through a silent connection", () => {
	test("a command times out, the connection is given up and the cache works again once the partition ends", async () => {
		const proxy = await silentProxy(6379);
		const kv = new RedisKeyValue(`redis://${proxy.address}`, `test:silent:${process.pid}:`);
		try {
			await kv.set("k", "v", 60_000);
			proxy.silence();
			const t0 = Date.now();
			const failed = await timed(kv.get("k"));
			expect(isCacheUnavailable(failed.error)).toBe(true);
			expect(failed.ms).toBeLessThan(3500);
			await sleep(1000);
			proxy.restore();
			const back = await until("the cache answers again", async () => (await kv.get("k")) === "v", 15_000);
			console.log(`Redis silent: command failed after ${failed.ms} ms; answering again ${back} ms after the partition ended (${Date.now() - t0} ms after it began)`);
			await kv.del("k");
		} finally {
			await kv.close();
			await proxy.close();
		}
	});
});

servers.describe("NATS through a silent connection", () => {
	test("the transporter notices within seconds, and the node is connected again once the partition ends", async () => {
		const proxy = await silentProxy(4222);
		const dataDir = mkdtempSync(path.join(os.tmpdir(), "silent-nats-"));
		const cfg = { ...readConfig(), dataDir, nodeId: `silent-${process.pid}`, namespace: `test-silent-${process.pid}`, transporter: `nats://${proxy.address}` };
		const broker = new ServiceBroker({ nodeID: cfg.nodeId, namespace: cfg.namespace, transporter: brokerOptions(cfg).transporter, logger: false });
		const watch = new TransportWatch(broker);
		try {
			await broker.start();
			watch.start();
			await sleep(300);
			expect(watch.connected).toBe(true);
			proxy.silence();
			const noticed = await until("the silent connection noticed", async () => !watch.connected, 15_000);
			expect(noticed).toBeLessThan(8000);
			proxy.restore();
			const back = await until("connected again", async () => watch.connected, 20_000);
			console.log(`NATS silent: noticed after ${noticed} ms; connected again ${back} ms after the partition ended`);
		} finally {
			watch.stop();
			await Promise.race([broker.stop(), sleep(5000)]);
			await proxy.close();
			rmSync(dataDir, { recursive: true, force: true });
		}
	});
});
