/**
 * What one `GET /status` costs the document store. Each domain service's health pings every one of its collection
 * stores, and on PostgreSQL every store of a node shares one connection pool: concurrent pings share one `select 1`
 * (runtime/relational.ts), instead of 73 round trips queued on the pool per /status, behind the requests' own
 * statements (50 stalled cursors made /status wait 130-260 ms on a loaded machine: test/integration/resources.test.ts).
 */
import { Client } from "pg";
import { bootTenancy, type Tenancy } from "../helpers/tenants";
import { needServers } from "../helpers/platform";
import { PG_BASE, recordStatements } from "../helpers/pg";
import { freePort } from "../helpers/ports";
import { openRelational, releaseRelational } from "../../runtime/relational";

const ROUNDS = 10;

describe("GET /status", () => {
	let t: Tenancy;
	beforeAll(async () => {
		t = await bootTenancy();
	}, 120_000);
	afterAll(() => t?.cleanup());

	test("pings the document store a few times, not once per collection store; every dependency up", async () => {
		const status = () => fetch(`${t.p.url}/status`).then(async (r) => ({ status: r.status, body: (await r.json()) as { status: string; info: Record<string, unknown> } }));
		await status(); // the first one opens what it checks
		let pings = 0;
		const query = Client.prototype.query as (...a: unknown[]) => unknown;
		const spy = jest.spyOn(Client.prototype, "query").mockImplementation(function (this: Client, ...a: any[]) {
			if ((typeof a[0] === "string" ? a[0] : a[0]?.text) === "select 1") pings++;
			return query.apply(this, a);
		} as any);
		try {
			for (let i = 0; i < ROUNDS; i++) {
				const s = await status();
				expect(s.status).toBe(200);
				expect(s.body.status).toBe("ok");
				expect(s.body.info["document store"]).toEqual({ status: "up", kind: "postgres" });
			}
		} finally {
			spy.mockRestore();
		}
		console.log(`${pings / ROUNDS} select 1 per /status`);
		// One per pool when the health checks meet; a few when one check starts after another's ping answered.
		expect(pings / ROUNDS).toBeLessThanOrEqual(4);
	});
});

/** The local PostgreSQL server, for the pool's own ping: decided when the file loads. */
const pg = needServers(["PostgreSQL", 5432]);

pg.describe("the pool's ping", () => {
	test("concurrent pings share one select 1; the next one asks again; a server that is gone answers false to each", async () => {
		const cfg = { dataDir: "unused", databaseUrl: `${PG_BASE}/test` };
		const rel = await openRelational(cfg);
		const statements = recordStatements(new Client());
		try {
			expect(await Promise.all(Array.from({ length: 20 }, () => rel.ping()))).toEqual(Array(20).fill(true));
			expect(statements.statements.filter((q) => q === "select 1")).toHaveLength(1);
			// Not an answer kept: each later check pings again.
			expect(await rel.ping()).toBe(true);
			expect(await rel.ping()).toBe(true);
			expect(statements.statements.filter((q) => q === "select 1")).toHaveLength(3);
		} finally {
			statements.restore();
			await releaseRelational(cfg);
		}
		// A port nothing listens on: every caller of the shared ping gets false, none an exception.
		const port = await freePort();
		const gone = { dataDir: "unused", databaseUrl: `postgres://postgres@127.0.0.1:${port}/test` };
		const down = await openRelational(gone);
		try {
			expect(await Promise.all(Array.from({ length: 5 }, () => down.ping()))).toEqual(Array(5).fill(false));
			expect(await down.ping()).toBe(false);
		} finally {
			await releaseRelational(gone);
		}
	});
});
