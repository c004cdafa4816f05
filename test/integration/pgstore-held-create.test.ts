/**
 * A create on PostgreSQL is one statement (stores/unit.ts, "held back"): the unit of work holds the document
 * insert back and the outbox's append writes it and the change events together, its own transaction, without BEGIN
 * and COMMIT. What must stay as with four round trips:
 * - the document and its events commit together or not at all (a failure inside the statement, after the insert ran,
 *   leaves neither);
 * - a held write that anything else in the unit needs (a read, another write) is written first, in the transaction;
 *   a unit ending without an append writes it alone, one that throws never writes it;
 * - a duplicate ref is the same 409 with the same message, for a create and a bulk create, and writes nothing;
 * - positions stay without gaps under concurrent creates, conflicts among them (a conflict draws no position).
 */
import { rmSync } from "fs";
import { Client } from "pg";
import { Outbox } from "../../events/outbox";
import { PgStore, unitOfWork } from "../../stores";
import { needServers, tempDir, type TestPlatform } from "../helpers/platform";
import { hexId, unique } from "../helpers/samples";
import { outboxRecords, pgPlatformKeepingEvents, testDatabase, type TestDatabase } from "../helpers/pg";

const servers = needServers(["PostgreSQL", 5432]);

let pg: TestDatabase | undefined;
beforeAll(async () => {
	pg = await testDatabase();
}, 30_000);
afterAll(async () => {
	await pg?.drop();
});

const event = (id: string) => ({ event: { id } as any, clients: [], actor: {} });

servers.describe("a held insert and its events: one statement", () => {
	const dir = tempDir("pgstore-held-");
	let outbox: Outbox;
	let store: PgStore;
	let admin: Client;
	const statements: string[] = [];
	let spy: jest.SpyInstance;
	beforeAll(async () => {
		const cfg = { dataDir: dir, databaseUrl: pg!.url };
		outbox = new Outbox(cfg);
		store = new PgStore(cfg, `held_${unique()}`);
		await outbox.connect();
		await store.connect();
		admin = new Client({ connectionString: pg!.url });
		await admin.connect();
		const query = Client.prototype.query as (...a: any[]) => any;
		spy = jest.spyOn(Client.prototype, "query").mockImplementation(function (this: Client, ...args: any[]) {
			if (this !== admin) statements.push(typeof args[0] === "string" ? args[0] : args[0].text);
			return query.apply(this, args);
		} as any);
	}, 30_000);
	afterAll(async () => {
		spy.mockRestore();
		await admin.end();
		await store.disconnect();
		await outbox.disconnect();
		rmSync(dir, { recursive: true, force: true });
	});
	beforeEach(() => {
		statements.length = 0;
	});
	const eventsOf = async (id: string) => (await outbox.readFrom(0, 1_000_000)).filter((r) => r.event.id === id);

	servers.test("create and append: one statement, no BEGIN or COMMIT; both are there", async () => {
		const id = hexId(1);
		const [rec] = await unitOfWork(async () => {
			await store.insert({ id, title: "one", deleted_at: null }, { hold: true });
			expect(statements).toEqual([]);
			return outbox.append([event(id)]);
		});
		expect(statements).toHaveLength(1);
		expect(statements[0]).toMatch(/^with d as \(insert into .* returning 1\), s as materialized/);
		expect(await store.findOne({ id })).toEqual({ id, title: "one", deleted_at: null });
		expect((await eventsOf(id)).map((r) => r.seq)).toEqual([rec.seq]);
	});

	servers.test("a bulk insert held with its events: one statement, every position in order", async () => {
		const ids = [hexId(2), hexId(3), hexId(4)];
		const recs = await unitOfWork(async () => {
			await store.insertMany(
				ids.map((id) => ({ id, deleted_at: null })),
				{ hold: true },
			);
			return outbox.append(ids.map(event));
		});
		expect(statements).toHaveLength(1);
		expect(await store.count({ id: { $in: ids } })).toBe(3);
		expect(recs.map((r) => r.seq)).toEqual([recs[0].seq, recs[0].seq + 1, recs[0].seq + 2]);
	});

	servers.test("a failure inside the statement after the insert ran: neither the document nor an event", async () => {
		const id = hexId(5);
		// The next position collides with a stored one: the statement fails after its insert, in the outbox part.
		const { rows } = await admin.query(`select max(seq)::bigint as m from "_outbox"`);
		const max = Number(rows[0].m);
		await admin.query(`select setval('"_outbox_seq"', $1)`, [max - 1]);
		try {
			const err = await unitOfWork(async () => {
				await store.insert({ id, deleted_at: null }, { hold: true });
				await outbox.append([event(id)]);
			}).catch((e) => e);
			expect(err).toMatchObject({ code: "23505", constraint: "_outbox_pkey" });
		} finally {
			await admin.query(`select setval('"_outbox_seq"', $1)`, [max]);
		}
		expect(await store.findOne({ id })).toBeNull();
		expect(await eventsOf(id)).toEqual([]);
		expect(Number((await admin.query(`select count(*)::int as n from "_outbox" where seq > $1`, [max])).rows[0].n)).toBe(0);
	});

	servers.test("a duplicate id: the statement fails before a position is drawn; nothing written", async () => {
		const id = hexId(6);
		await store.insert({ id, n: 1, deleted_at: null });
		const next = Number((await admin.query(`select last_value::bigint as v from "_outbox_seq"`)).rows[0].v);
		const err = await unitOfWork(async () => {
			await store.insert({ id, n: 2, deleted_at: null }, { hold: true });
			await outbox.append([event(id)]);
		}).catch((e) => e);
		expect(err).toMatchObject({ code: "23505" });
		expect(await store.findOne({ id })).toEqual({ id, n: 1, deleted_at: null });
		expect(await eventsOf(id)).toEqual([]);
		// No position drawn: the next append gets the one right after the last.
		const [rec] = await outbox.append([event(`after-${id}`)]);
		expect(rec.seq).toBe(next + 1);
	});

	servers.test("a read in the unit sees the held write: the transaction begins with it", async () => {
		const id = hexId(7);
		await unitOfWork(async () => {
			await store.insert({ id, deleted_at: null }, { hold: true });
			expect(await store.findOne({ id })).toEqual({ id, deleted_at: null });
			await outbox.append([event(id)]);
		});
		expect(statements[0]).toBe("begin");
		expect(statements.filter((s) => s === "commit")).toHaveLength(1);
		expect(await store.findOne({ id })).not.toBeNull();
		expect(await eventsOf(id)).toHaveLength(1);
	});

	servers.test("a unit ending without an append writes the held insert alone; one that throws writes nothing", async () => {
		const kept = hexId(8);
		await unitOfWork(() => store.insert({ id: kept, deleted_at: null }, { hold: true }));
		expect(statements).toHaveLength(1);
		expect(statements[0]).toMatch(/^insert into/);
		expect(await store.findOne({ id: kept })).not.toBeNull();
		statements.length = 0;
		const dropped = hexId(9);
		await expect(
			unitOfWork(async () => {
				await store.insert({ id: dropped, deleted_at: null }, { hold: true });
				throw new Error("the action fails");
			}),
		).rejects.toThrow("the action fails");
		expect(statements).toEqual([]);
		expect(await store.findOne({ id: dropped })).toBeNull();
	});

	servers.test("a second write in the unit: the held one first, both in one transaction", async () => {
		const [a, b] = [hexId(10), hexId(11)];
		await unitOfWork(async () => {
			await store.insert({ id: a, deleted_at: null }, { hold: true });
			await store.insert({ id: b, deleted_at: null }, { hold: true });
			await outbox.append([event(a), event(b)]);
		});
		expect(statements.map((s) => s.slice(0, 11))).toEqual(["begin", "insert into", "insert into", "with s as m", "commit"]);
		expect(await store.count({ id: { $in: [a, b] } })).toBe(2);
	});
});

servers.describe("creates over HTTP on PostgreSQL: the same answers, positions without gaps", () => {
	let p: TestPlatform | undefined;
	let token: string;
	beforeAll(async () => {
		if (!pg) return;
		p = await pgPlatformKeepingEvents(pg.url);
		token = await p.rootToken();
	}, 120_000);
	afterAll(async () => {
		await p?.cleanup();
	});
	const recordsFrom = (after: number) => outboxRecords(p!, after);
	const CONFLICT = { statusCode: 409, message: "ref already exists", error: "Conflict" };
	const titled = async (title: string) => (await p!.http("GET", `/content/notes?query=${encodeURIComponent(JSON.stringify({ title }))}`, { token })).body.total;

	servers.test("a duplicate ref: 409 with its message, for a create and a bulk create; nothing written, no event", async () => {
		const ref = `ref-${unique()}`;
		const first = await p!.http("POST", "/content/notes", { token, body: { title: "first", ref } });
		expect(first.status).toBe(200);
		const title = `dup-${unique()}`;
		const last = (await recordsFrom(0)).at(-1)!.seq;
		const again = await p!.http("POST", "/content/notes", { token, body: { title, ref } });
		expect({ status: again.status, body: again.body }).toEqual({ status: 409, body: CONFLICT });
		const bulk = await p!.http("POST", "/content/notes/bulk", {
			token,
			body: {
				items: [
					{ title, ref: `other-${unique()}` },
					{ title, ref },
				],
			},
		});
		expect({ status: bulk.status, body: bulk.body }).toEqual({ status: 409, body: CONFLICT });
		expect(await titled(title)).toBe(0);
		expect((await recordsFrom(last)).filter((r) => (r.event as any).after?.title === title)).toEqual([]);
	});

	servers.test(
		"40 concurrent creates, 10 of them conflicting: each created note has one event, positions without gaps",
		async () => {
			const ref = `taken-${unique()}`;
			expect((await p!.http("POST", "/content/notes", { token, body: { title: "taken", ref } })).status).toBe(200);
			const start = (await recordsFrom(0)).at(-1)!.seq;
			const title = `burst-${unique()}`;
			const answers = await Promise.all(
				Array.from({ length: 40 }, (_, i) => p!.http("POST", "/content/notes", { token, body: { title, content: String(i), ...(i % 4 === 0 ? { ref } : {}) } })),
			);
			expect(answers.map((a) => a.status).sort()).toEqual([...Array(30).fill(200), ...Array(10).fill(409)]);
			for (const a of answers.filter((x) => x.status === 409)) expect(a.body).toEqual(CONFLICT);
			const created = answers.filter((a) => a.status === 200).map((a) => a.body.data.id as string);
			const recs = await recordsFrom(start);
			const mine = recs.filter((r) => created.includes(r.event.id as string));
			expect(mine.map((r) => r.event.id).sort()).toEqual([...created].sort());
			// Every position after `start` up to the last is there: the conflicts drew none, nothing aborted after drawing.
			const seqs = recs.map((r) => r.seq);
			expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => start + 1 + i));
			expect(await titled(title)).toBe(30);
		},
		60_000,
	);
});
