/**
 * The change feed (events/feed.ts): one reader of the outbox per process, woken by this process's appends and by
 * PostgreSQL's NOTIFY of any process's, with a poll as the safety net. Its readers (consumer groups, relay, search
 * index, live cursors) read from its memory; a reader outside the span it holds reads the outbox. Checked on a
 * database of its own: what another "process" (a second outbox on other connections) appends arrives by
 * notification alone, in commit order and without gaps; a lost listening connection is replaced; idle, the process
 * reads the outbox once per poll however many readers wait.
 */
import { Client } from "pg";
import { Outbox } from "../../events/outbox";
import { ChangeFeed } from "../../events/feed";
import { PgOutbox, type PgOutboxRow } from "../../stores/pg.outbox";
import { needServers } from "../helpers/platform";
import { storeDatabase } from "../helpers/pg";
import { sleep, waitFor } from "../helpers/wait";

const servers = needServers(["PostgreSQL", 5432]);
const db = storeDatabase("change-feed-");

type Rec = { seq: number; n: number };
const record = (n: number) => ({ event: { id: `e${n}`, topic: "content.notes" } as any, clients: ["c1"], actor: {}, n });

/** A feed over a PgOutbox of its own, polling only every `pollMs`: what it reads sooner came by notification. */
function feedOver(pg: PgOutbox, opts: { pollMs?: number; ring?: number } = {}): ChangeFeed<Rec> {
	return new ChangeFeed<Rec>(
		{
			head: () => pg.head(),
			readFrom: async (after, limit, deadlineMs) =>
				(await pg.readFrom<{ n: number }>(after, limit, deadlineMs)).map((r: PgOutboxRow<{ n: number }>) => ({ seq: r.seq, n: r.rec.n })),
			listen: (onNotify, onLost) => pg.listen(onNotify, onLost),
		},
		{ pollMs: opts.pollMs ?? 3_600_000, ring: opts.ring },
	);
}

servers.describe("the change feed", () => {
	let writer: PgOutbox;
	let reader: PgOutbox;
	let admin: Client;
	beforeAll(async () => {
		if (!db.up()) return;
		writer = new PgOutbox(db.cfg());
		reader = new PgOutbox(db.cfg());
		await writer.connect();
		await reader.connect();
		admin = new Client({ connectionString: db.url() });
		await admin.connect();
	}, 30_000);
	afterAll(async () => {
		await admin?.end();
		await reader?.disconnect();
		await writer?.disconnect();
	});

	test("another process's appends arrive by notification alone, every one, in order", async () => {
		const feed = feedOver(reader);
		await feed.start();
		try {
			const from = await reader.head();
			const seen: Rec[] = [];
			let at = from;
			feed.on("readable", () => {
				const recs = feed.read(at, 10_000) ?? [];
				seen.push(...recs);
				if (recs.length) at = recs[recs.length - 1].seq;
			});
			// Single appends, and concurrent ones that commit as groups.
			for (let i = 0; i < 5; i++) await writer.append([record(i)]);
			await Promise.all(Array.from({ length: 40 }, (_, i) => writer.append([record(100 + i), record(200 + i)])));
			const stored = (await admin.query("select seq from _outbox where seq > $1 order by seq", [from])).rows.map((r) => Number(r.seq));
			expect(stored).toHaveLength(85);
			await waitFor(() => seen.length >= 85, "85 records through the feed", 5000);
			expect(seen.map((r) => r.seq)).toEqual(stored);
			expect(new Set(seen.map((r) => r.n)).size).toBe(85);
		} finally {
			await feed.stop();
		}
	});

	test("a reader in the span the feed holds reads memory; one behind it or ahead of it is told to read the outbox", async () => {
		const feed = feedOver(reader, { ring: 10 });
		await feed.start();
		try {
			const from = await reader.head();
			await writer.append(Array.from({ length: 25 }, (_, i) => record(i)));
			await feed.wake();
			const seqs = (await admin.query("select seq from _outbox where seq > $1 order by seq", [from])).rows.map((r) => Number(r.seq));
			// The newest 10 are held: from the 15th on.
			expect(feed.read(seqs[14], 100)?.map((r) => r.seq)).toEqual(seqs.slice(15));
			expect(feed.read(seqs[20], 2)?.map((r) => r.seq)).toEqual(seqs.slice(21, 23));
			expect(feed.read(seqs[24], 100)).toEqual([]);
			expect(feed.read(seqs[13], 100)).toBeUndefined();
			expect(feed.read(from, 100)).toBeUndefined();
			expect(feed.read(seqs[24] + 1, 100)).toBeUndefined();
		} finally {
			await feed.stop();
		}
	});

	test("a listening connection that is terminated is replaced: later appends still arrive by notification", async () => {
		const feed = feedOver(reader);
		await feed.start();
		try {
			const pid = (await admin.query("select pid from pg_stat_activity where datname = current_database() and query ilike 'listen %'")).rows[0]?.pid;
			expect(pid).toBeDefined();
			await admin.query("select pg_terminate_backend($1)", [pid]);
			// A new LISTEN, on another backend, within a few seconds.
			const relisten = async () => {
				for (const end = Date.now() + 5000; Date.now() < end; await sleep(50)) {
					const { rows } = await admin.query("select count(*)::int as n from pg_stat_activity where datname = current_database() and query ilike 'listen %' and pid <> $1", [pid]);
					if (rows[0].n === 1) return true;
				}
				return false;
			};
			expect(await relisten()).toBe(true);
			const from = await reader.head();
			const arrived = new Promise<void>((resolve) => feed.once("readable", () => resolve()));
			await writer.append([record(1)]);
			await arrived;
			expect(feed.read(from, 10)?.map((r) => r.n)).toEqual([1]);
		} finally {
			await feed.stop();
		}
	});

	test("idle, a process reads the outbox once per poll however many readers wait; they share the records, read-only", async () => {
		const outbox = new Outbox(db.cfg());
		await outbox.connect();
		const readers = Array.from({ length: 6 }, () => () => undefined);
		for (const r of readers) outbox.on("readable", r);
		try {
			await waitFor(() => outbox.feed.started, "the feed started", 5000);
			const before = outbox.feed.reads;
			await sleep(3200);
			// The poll every second (FEED_POLL_MS), whatever the readers do.
			expect(outbox.feed.reads - before).toBeGreaterThanOrEqual(2);
			expect(outbox.feed.reads - before).toBeLessThanOrEqual(4);
			const from = await outbox.head();
			const got = new Promise<void>((resolve) => outbox.once("readable", () => resolve()));
			await writer.append([record(7), record(8)]);
			await got;
			const a = await outbox.readFed(from, 10);
			const b = await outbox.readFed(from, 10);
			expect(a.map((r) => (r as unknown as Rec).n)).toEqual([7, 8]);
			expect(b[0]).toBe(a[0]);
			expect(() => {
				(a[0].event as any).id = "changed";
			}).toThrow(TypeError);
			expect(a[0].event.id).toBe("e7");
			// A reader not in the feed's span reads the outbox itself.
			expect((await outbox.readFed(from - 1_000_000, 1000)).map((r) => r.seq)).toEqual(
				(await admin.query("select seq from _outbox where seq > $1 order by seq limit 1000", [from - 1_000_000])).rows.map((r) => Number(r.seq)),
			);
		} finally {
			for (const r of readers) outbox.off("readable", r);
			await outbox.disconnect();
		}
	});

	test("no reader waiting, no feed: an outbox that only appends never reads", async () => {
		const outbox = new Outbox(db.cfg());
		await outbox.connect();
		try {
			await outbox.append([record(9)] as any);
			await sleep(1200);
			expect(outbox.feed.started).toBe(false);
			expect(outbox.feed.reads).toBe(0);
		} finally {
			await outbox.disconnect();
		}
	});
});
