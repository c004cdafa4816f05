/**
 * The transactional outbox on PostgreSQL (DOCUMENT_STORE=postgres):
 * - the whole platform runs on it (documents, outbox, stream positions);
 * - a write and its change events commit together: a failure between them (the process dying there is the same
 *   transaction never committed) leaves neither the document nor an event, and the client was never acknowledged;
 * - positions follow commit order: a reader advancing while writers commit out of order skips nothing;
 * - the relay publishes in that order, marks its position, and after a crash at any point loses nothing.
 */
import { rmSync } from "fs";
import { Client } from "pg";
import { sharedOutbox, type OutboxRecord } from "../../events/outbox";
import { PgStore, unitOfWork } from "../../stores";
import { PgOutbox } from "../../stores/pg.outbox";
import { Outbox } from "../../events/outbox";
import { tempDir, type TestPlatform } from "../helpers/platform";
import { needServers } from "../helpers/platform";
import { Relay } from "../../events/relay";
import type { ChannelsStream } from "../../events/channels.stream";
import type { PlatformConfig } from "../../runtime/config";
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

servers.describe("the platform on PostgreSQL: a write and its events commit together", () => {
	let p: TestPlatform | undefined;
	let token: string;
	beforeAll(async () => {
		if (!pg) return;
		p = await pgPlatformKeepingEvents(pg.url);
		token = await p.rootToken();
	}, 120_000);
	afterAll(async () => {
		jest.restoreAllMocks();
		await p?.cleanup();
	});

	servers.test("create, patch, delete: each acknowledged write has exactly its event", async () => {
		const title = `tx-${unique()}`;
		const created = await p!.http("POST", "/content/notes", { token, body: { title, content: "x" } });
		expect(created.status).toBe(200);
		const id = created.body.data.id;
		expect((await p!.http("PATCH", `/content/notes/${id}`, { token, body: { title: `${title}-2` } })).status).toBe(200);
		expect((await p!.http("DELETE", `/content/notes/${id}`, { token })).status).toBe(200);
		const events = (await outboxRecords(p!)).filter((r) => r.event.id === id);
		expect(events.map((r) => r.event.op)).toEqual(["c", "u", "d"]);
		expect(events.every((r, i) => i === 0 || r.seq > events[i - 1].seq)).toBe(true);
	});

	servers.test("a failure between the document write and its events: no document, no event, no acknowledgement", async () => {
		const title = `lost-${unique()}`;
		const before = (await outboxRecords(p!)).length;
		const spy = jest.spyOn(PgOutbox.prototype, "append").mockRejectedValueOnce(new Error("simulated crash between the write and its events"));
		const r = await p!.http("POST", "/content/notes", { token, body: { title, content: "x" } });
		expect(spy).toHaveBeenCalledTimes(1);
		expect(r.status).toBe(500);
		expect(r.body).toEqual({ statusCode: 500, message: "internal error", error: "Internal Server Error" });
		const listed = await p!.http("GET", `/content/notes?query=${encodeURIComponent(JSON.stringify({ title }))}`, { token });
		expect(listed.status).toBe(200);
		expect(listed.body.total).toBe(0);
		expect((await outboxRecords(p!)).length).toBe(before);
		// The same for a patch: the title stays as it was.
		const ok = await p!.http("POST", "/content/notes", { token, body: { title, content: "x" } });
		expect(ok.status).toBe(200);
		jest.spyOn(PgOutbox.prototype, "append").mockRejectedValueOnce(new Error("simulated crash"));
		expect((await p!.http("PATCH", `/content/notes/${ok.body.data.id}`, { token, body: { title: "changed" } })).status).toBe(500);
		expect((await p!.http("GET", `/content/notes/${ok.body.data.id}`, { token })).body.data.title).toBe(title);
		const events = (await outboxRecords(p!)).filter((e) => e.event.id === ok.body.data.id);
		expect(events.map((e) => e.event.op)).toEqual(["c"]);
	});
});

servers.describe("commit order without clocks", () => {
	const dir = tempDir("pgstore-order-");
	afterAll(() => rmSync(dir, { recursive: true, force: true }));

	servers.test(
		"writers committing out of order: a reader advancing by position skips nothing",
		async () => {
			const cfg = { dataDir: dir, databaseUrl: pg!.url };
			const outbox = new Outbox(cfg);
			const store = new PgStore(cfg, `order_${unique()}`);
			await outbox.connect();
			await store.connect();
			// Every commit waits a random while: transactions that drew their positions earlier commit later.
			const query = Client.prototype.query as (...a: any[]) => any;
			const spy = jest.spyOn(Client.prototype, "query").mockImplementation(function (this: Client, ...args: any[]) {
				if (args[0] === "commit") return new Promise((r) => setTimeout(r, Math.random() * 25)).then(() => query.apply(this, args));
				return query.apply(this, args);
			} as any);
			const start = (await outbox.readFrom(0, 100_000)).length;
			const ids: string[] = [];
			let writing = true;
			const seen: string[] = [];
			const reader = (async () => {
				let pos = 0;
				for (;;) {
					const last = !writing;
					const batch = await outbox.readFrom(pos, 50);
					for (const r of batch) {
						seen.push(r.event.id as string);
						pos = r.seq;
					}
					if (last && batch.length < 50) return;
					await new Promise((r) => setTimeout(r, 2));
				}
			})();
			try {
				await Promise.all(
					Array.from({ length: 8 }, async (_, w) => {
						for (let i = 0; i < 25; i++) {
							const id = hexId(w * 1000 + i);
							ids.push(id);
							await unitOfWork(async () => {
								await store.insert({ id, deleted_at: null });
								await new Promise((r) => setTimeout(r, Math.random() * 5));
								await outbox.append([{ event: { id } as any, clients: [], actor: {} }]);
							});
						}
					}),
				);
			} finally {
				writing = false;
				await reader;
				spy.mockRestore();
			}
			expect(seen.length - start).toBeGreaterThanOrEqual(0);
			const mine = seen.filter((id) => ids.includes(id));
			expect(new Set(mine).size).toBe(mine.length);
			expect([...mine].sort()).toEqual([...ids].sort());
			expect(await store.count({})).toBe(200);
			await store.disconnect();
			await outbox.disconnect();
		},
		60_000,
	);
});

servers.describe("the relay on the PostgreSQL outbox", () => {
	const dir = tempDir("pgstore-relay-");
	afterAll(() => rmSync(dir, { recursive: true, force: true }));

	function fakeStream(fail: { at?: number }) {
		const published: number[] = [];
		const stream = {
			opts: { channel: "changes" },
			subject: "test.changes",
			isConnected: () => true,
			async publish(rec: OutboxRecord) {
				if (fail.at !== undefined && published.length === fail.at) {
					fail.at = undefined;
					throw new Error("simulated crash while publishing");
				}
				published.push(rec.seq);
			},
		};
		return { stream: stream as unknown as ChannelsStream, published };
	}

	let what = () => "";
	const until = async (cond: () => boolean, ms = 20_000) => {
		const end = Date.now() + ms;
		while (!cond()) {
			if (Date.now() > end) throw new Error(`timed out (${what()})`);
			await new Promise((r) => setTimeout(r, 20));
		}
	};

	servers.test(
		"publishes in commit order, marks its position; a crash while publishing or before the mark loses nothing",
		async () => {
			const cfg = { dataDir: dir, databaseUrl: pg!.url, namespace: `relay-${unique()}`, streamRetentionHours: 168 } as unknown as PlatformConfig;
			const outbox = sharedOutbox(cfg);
			await outbox.connect();
			const base = (await outbox.readFrom(0, 1_000_000)).at(-1)?.seq ?? 0;
			const seqs: number[] = [];
			for (let i = 0; i < 30; i++)
				seqs.push(...(await outbox.append(Array.from({ length: 10 }, (_, j) => ({ event: { id: `e${i}-${j}` } as any, clients: [], actor: {} })))).map((r) => r.seq));
			const logger = { warn: () => undefined, info: () => undefined };

			// 1. Fails at the 120th publish: retried from the position, nothing skipped.
			const fail: { at?: number } = { at: 120 };
			const a = fakeStream(fail);
			// 2. Marks beyond 150 fail (the node dies before its next mark): a new relay republishes from the last mark,
			// which only repeats.
			const original = PgStore.prototype.setOne;
			const setOne = jest.spyOn(PgStore.prototype, "setOne").mockImplementation(function (this: PgStore, id: string, set: Record<string, unknown>) {
				if (id.startsWith("relay:") && Number(set.seq) > base + 150) return Promise.reject(new Error("simulated crash before the mark"));
				return original.call(this, id, set);
			});
			const relay1 = new Relay(cfg, a.stream, logger, "node-a");
			what = () => `a: ${a.published.length} missing ${seqs.filter((s) => !a.published.includes(s))}, leader ${relay1.leader}, position ${relay1.position}`;
			relay1.start();
			await until(() => a.published.filter((s) => s > base).length >= 300);
			await relay1.stop();
			setOne.mockRestore();
			const b = fakeStream({});
			const relay2 = new Relay(cfg, b.stream, logger, "node-b");
			relay2.start();
			await outbox.append([{ event: { id: "late" } as any, clients: [], actor: {} }]);
			await until(() => b.published.includes(Math.max(...seqs) + 1));
			await relay2.stop();
			await outbox.disconnect();

			const all = [...a.published, ...b.published].filter((s) => s > base);
			// Everything, each record at least once; in order within each relay's run.
			expect([...new Set(all)].sort((x, y) => x - y)).toEqual([...seqs, Math.max(...seqs) + 1]);
			for (const run of [a.published, b.published]) expect(run.every((s, i) => i === 0 || s > run[i - 1])).toBe(true);
			// Repeats only of what was published after the last mark.
			expect(all.length - new Set(all).size).toBeLessThanOrEqual(300);
			expect(b.published.length).toBeGreaterThan(1);
		},
		60_000,
	);
});
