/**
 * The dispatcher's queue statements on a real PostgreSQL (own schema): claim (per-document order, the fields a
 * delivery needs, the payload's exact text, fair across configs), release, and settles batched while one statement runs.
 */
import { randomBytes } from "crypto";
import { Pool } from "pg";
import { migrate, openRelational, releaseRelational, type NamedStatement, type Relational } from "../../runtime/relational";
import { CLAIM, CLAIM_PLAN, DeliveryStore, MIGRATIONS, type NewDelivery } from "../../workers/dispatcher/store";
import { needServers } from "../helpers/platform";

const servers = needServers(["PostgreSQL", 5432]);

servers.describe("dispatcher queue statements, real PostgreSQL", () => {
	const base = "postgres://postgres@127.0.0.1:5432/test";
	const schema = `dispatcher_store_${randomBytes(5).toString("hex")}`;
	const cfg = { databaseUrl: `${base}?options=${encodeURIComponent(`-c search_path=${schema}`)}`, dataDir: "" };
	let admin: Pool;
	let db: Relational;
	/** The statements sent, by name (a named statement) or "text". */
	const sent: string[] = [];
	let store: DeliveryStore;

	beforeAll(async () => {
		admin = new Pool({ connectionString: base, max: 2 });
		await admin.query(`create schema ${schema}`);
		const real = await openRelational(cfg);
		await migrate(real, "dispatcher", MIGRATIONS);
		// The real store, its statements recorded on the way.
		db = Object.create(real, {
			query: {
				value: (text: string | NamedStatement, params?: unknown[]) => {
					sent.push(typeof text === "string" ? "text" : text.name);
					return real.query(text, params);
				},
			},
		});
		store = new DeliveryStore(db);
	});
	afterAll(async () => {
		await releaseRelational(cfg);
		await admin.query(`drop schema if exists ${schema} cascade`);
		await admin.end();
	});

	const row = (seq: number, doc: string, body = `{"seq":${seq}}`, config: string | null = "cfg1"): NewDelivery => ({
		event_id: `${seq}:${doc}:c`,
		seq,
		ts_ms: 1_700_000_000_000 + seq,
		client_id: config === "cfg1" ? "client-a" : `client-${config}`,
		config_id: config,
		url: "http://127.0.0.1:9/hook",
		topic: "content.notes",
		op: "c",
		document_id: doc,
		body,
		status: "pending",
	});

	test("claim: the oldest pending event per document, the delivery's fields and the payload's exact text", async () => {
		const odd = '{"b":1,"a":"naïve \\u0000 東京"}';
		expect(await store.enqueue([row(1, "d1", odd), row(2, "d1"), row(3, "d2")])).toBe(2 + 1);
		const claimed = await store.claim("owner-1", 10, 60);
		expect(claimed.map((c) => c.event_id).sort()).toEqual(["1:d1:c", "3:d2:c"]);
		const first = claimed.find((c) => c.event_id === "1:d1:c")!;
		expect(first).toEqual({
			id: expect.any(String),
			event_id: "1:d1:c",
			client_id: "client-a",
			config_id: "cfg1",
			url: "http://127.0.0.1:9/hook",
			attempts: 0,
			body: odd,
			ts_ms: 1_700_000_000_001,
		});
		// Leased: not claimed again; released: claimable again.
		expect(await store.claim("owner-2", 10, 60)).toEqual([]);
		await store.release(first.id, "owner-1");
		expect((await store.claim("owner-2", 10, 60)).map((c) => c.event_id)).toEqual(["1:d1:c"]);
		expect(sent).toContain("dispatcher-release");
	});

	test("settles of one turn go in one statement; those arriving while it runs go in the next one", async () => {
		await admin.query(`truncate ${schema}.deliveries cascade`);
		await store.enqueue(Array.from({ length: 15 }, (_, i) => row(100 + i, `doc${i}`)));
		const claimed = await store.claim("owner-3", 15, 60);
		expect(claimed).toHaveLength(15);
		sent.length = 0;
		const ok = (c: (typeof claimed)[number]) =>
			store.settle(c, "owner-3", { url: c.url, status: 204, error: null, durationMs: 3 }, { status: "delivered", attempts: 1, lastError: null });
		const firstTen = claimed.slice(0, 10).map(ok);
		// The first statement is sent in the next turn; these five arrive while it runs.
		await new Promise((r) => setImmediate(r));
		expect(sent).toEqual(["dispatcher-settle-10"]);
		const lastFive = claimed
			.slice(10)
			.map((c, i) =>
				i < 4
					? ok(c)
					: store.settle(c, "owner-3", { url: c.url, status: 500, error: "HTTP 500", durationMs: 5 }, { status: "pending", attempts: 1, nextInSec: 30, lastError: "HTTP 500" }),
			);
		await Promise.all([...firstTen, ...lastFive]);
		expect(sent).toEqual(["dispatcher-settle-10", "dispatcher-settle-5"]);
		const rows = (await admin.query(`select id::text, status, attempts, last_status, locked_by, next_at > now() + interval '20 seconds' as later from ${schema}.deliveries`)).rows;
		const failed = claimed[14].id;
		expect(rows.filter((r) => r.id !== failed).map((r) => [r.status, r.attempts, r.last_status, r.locked_by])).toEqual(Array(14).fill(["delivered", 1, 204, null]));
		expect(rows.find((r) => r.id === failed)).toEqual({ id: failed, status: "pending", attempts: 1, last_status: 500, locked_by: null, later: true });
		const att = (await admin.query(`select count(*)::int as n from ${schema}.delivery_attempts`)).rows[0].n;
		expect(att).toBe(15);
	});

	test("claim: every config's queue in turn, each up to its share; one config's backlog never stands in front of another's rows", async () => {
		await admin.query(`truncate ${schema}.deliveries cascade`);
		// Config A: a backlog of 100; config B: two events of one document and one of another; a row without a config.
		await store.enqueue(Array.from({ length: 100 }, (_, i) => row(10 + i, `a${i}`, undefined, "A")));
		await store.enqueue([row(1000, "b0", undefined, "B"), row(1001, "b0", undefined, "B"), row(1002, "b1", undefined, "B"), row(1003, "n0", undefined, null)]);
		const seqs = (claimed: Array<{ event_id: string }>) => claimed.map((c) => Number(c.event_id.split(":")[0])).sort((x, y) => x - y);
		// A round takes the first due row of every queue: three rows, one of each, A's backlog first in time.
		expect(seqs(await store.claim("owner-f1", 3, 60, 10))).toEqual([10, 1000, 1003]);
		// Shares: A may have one more (it has one in flight), the row without a config none; B's second event of b0
		// waits behind the first (leased, not settled).
		expect(
			seqs(
				await store.claim(
					"owner-f2",
					10,
					60,
					4,
					new Map([
						["A", 1],
						["", 0],
					]),
				),
			),
		).toEqual([11, 1002]);
		expect(await store.claim("owner-f3", 10, 60, 4, new Map([["A", 0]]))).toEqual([]);
		// Without shares of its own, a config gives at most `share` rows.
		expect(seqs(await store.claim("owner-f4", 10, 60, 4))).toEqual([12, 13, 14, 15]);
	});

	test("claim walks the queue from its head: 1 000 pending rows unknown to the statistics, 10 claimed in (next_at, seq) order, about 25 rows read", async () => {
		await admin.query(`truncate ${schema}.deliveries cascade`);
		// Statistics of an empty table (as after a quiet period): the planner expects almost no pending row.
		await admin.query(`analyze ${schema}.deliveries`);
		// d0 has two events (the second waits for the first); one retry is due later; then 1 000 other documents.
		await store.enqueue([row(1, "d0"), row(2, "d0")]);
		await admin.query(`update ${schema}.deliveries set next_at = now() + interval '1 hour' where seq = 2`);
		await store.enqueue(Array.from({ length: 1000 }, (_, i) => row(10 + i, `doc${i}`)));
		await admin.query(`update ${schema}.deliveries set next_at = now() - interval '1 minute' where seq between 500 and 504`);
		const seqs = (claimed: Array<{ event_id: string }>) => claimed.map((c) => Number(c.event_id.split(":")[0])).sort((x, y) => x - y);
		// The earliest due first (seq 500-504 are overdue), then by seq; seq 2 is neither due nor first of its document.
		expect(seqs(await store.claim("owner-4", 3, 60))).toEqual([500, 501, 502]);
		expect(seqs(await store.claim("owner-5", 10, 60))).toEqual([1, 10, 11, 12, 13, 14, 15, 16, 503, 504]);
		// The claim's values are written into its text: an owner with quotes is stored as it is.
		const quoted = await store.claim(`node 'a' \\ "b"`, 1, 60);
		expect((await admin.query(`select locked_by from ${schema}.deliveries where id = $1`, [quoted[0].id])).rows).toEqual([{ locked_by: `node 'a' \\ "b"` }]);
		// The planner settings end with the claim's transaction: the connection it used (the pool's last idle one)
		// plans with the defaults again.
		const used = await db.client();
		try {
			expect((await used.query("show enable_sort")).rows).toEqual([{ enable_sort: "on" }]);
		} finally {
			used.release();
		}
		// The claim's plan with its settings: the queue's index walked in order, sorts of the rows taken only, and the walk
		// stops after the rows it takes (and the leased ones it passes), not after all 1 000.
		const client = await admin.connect();
		try {
			await client.query("begin");
			await client.query(`set local search_path = ${schema}`);
			await client.query(CLAIM_PLAN);
			await client.query(`prepare claim_plan (text, integer, float8, integer, text) as ${CLAIM}`);
			const plan = (await client.query("explain (analyze, format json) execute claim_plan('owner-6', 10, 60, 10, '{}')")).rows[0]["QUERY PLAN"][0].Plan;
			const nodes: any[] = [];
			const walk = (n: any) => (nodes.push(n), (n.Plans ?? []).forEach(walk));
			walk(plan);
			for (const sort of nodes.filter((n) => n["Node Type"] === "Sort")) expect(sort["Actual Rows"]).toBeLessThanOrEqual(10);
			const scans = nodes.filter((n) => n["Relation Name"] === "deliveries" && n.Alias !== "e" && n.Alias !== "d");
			for (const s of scans) expect([s["Node Type"], s["Index Name"]]).toEqual(["Index Scan", "deliveries_queue"]);
			const scan = scans.find((n) => n.Alias === "c");
			// 14 leased passed on the way, then the 10 rows taken (and the one the limit stops at): against all 1 000 with
			// the statistics' plan.
			expect(scan["Actual Rows"] + (scan["Rows Removed by Filter"] ?? 0)).toBeLessThanOrEqual(14 + 11);
			await client.query("rollback");
		} finally {
			client.release();
		}
	});
});
