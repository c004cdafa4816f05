/**
 * The embedded change stream (EVENT_STREAM=outbox): consumer groups reading the persisted outbox, at least once,
 * each from its own durable position.
 */
import { rmSync } from "fs";
import { randomBytes } from "crypto";
import { sharedOutbox, type Outbox, type OutboxRecord } from "../../events/outbox";
import { OutboxStream, sharedStream, type Consumer } from "../../events/stream";
import { bootPlatform, tempDir, type TestPlatform } from "../helpers/platform";
import { sleep, waitFor } from "../helpers/wait";

jest.setTimeout(60_000);

/** Resolves once `check` holds, polling; fails with `what` after `ms`. */

function record(n: number): Omit<OutboxRecord, "seq"> {
	const id = randomBytes(12).toString("hex");
	return {
		event: { id, ts_ms: Date.now(), op: "c", topic: "content.notes", source: { name: "platform", db: "content", collection: "notes" }, after: { id, n } as any },
		clients: [],
		actor: {},
	};
}

describe("embedded stream over the outbox", () => {
	let dataDir: string;
	let cfg: { dataDir: string };
	let outbox: Outbox;
	let stream: OutboxStream;
	const consumers: Consumer[] = [];

	async function append(count: number): Promise<number[]> {
		const out = await outbox.append(Array.from({ length: count }, (_, i) => record(i)));
		return out.map((r) => r.seq);
	}

	/**
	 * A consumer that collects the seqs it handled. Its handler waits until `consume` has answered: a group may read
	 * its first batch before that (the outbox answers from memory or its index at once), and `fail` may need the
	 * consumer.
	 */
	async function collect(s: OutboxStream, group: string, seen: number[], fail?: (rec: OutboxRecord, c: Consumer) => boolean): Promise<Consumer> {
		let started!: (c: Consumer) => void;
		const consumer = new Promise<Consumer>((r) => (started = r));
		const c = await s.consume(group, async (rec) => {
			if (fail?.(rec, await consumer)) throw new Error(`fails on ${rec.seq}`);
			seen.push(rec.seq);
		});
		started(c);
		consumers.push(c);
		return c;
	}

	beforeEach(async () => {
		dataDir = tempDir("stream-test-");
		cfg = { dataDir };
		outbox = sharedOutbox(cfg);
		await outbox.connect();
		stream = new OutboxStream(cfg);
	});

	afterEach(async () => {
		for (const c of consumers.splice(0)) await c.stop();
		await stream.close();
		await outbox.disconnect();
		rmSync(dataDir, { recursive: true, force: true });
	});

	test("a burst of appends reaches a waiting group as one batch; readers get copies, not the writer's objects", async () => {
		const batches: OutboxRecord[][] = [];
		consumers.push(await stream.consumeBatches("burst", async (recs) => void batches.push(recs)));
		// The group has read the empty outbox and waits for the outbox's signal.
		await new Promise((r) => setTimeout(r, 100));
		const written = Array.from({ length: 5 }, (_, i) => ({ ...record(i), clients: ["c1"] }));
		const seqs = (await Promise.all(written.map((w) => outbox.append([w])))).map(([r]) => r.seq);
		// The writer changes its objects afterwards (the document's arrays are the caller's).
		for (const w of written) w.clients.push("later");
		await waitFor(() => batches.flat().length === 5, "the five records handled");
		// Woken once for the burst, not once per append (a slow machine may split it in two at most).
		expect(batches.length).toBeLessThanOrEqual(2);
		expect(batches.flat().map((r) => r.seq)).toEqual(seqs);
		expect(batches.flat().map((r) => r.clients)).toEqual(seqs.map(() => ["c1"]));
	});

	test("a handler that throws gets the event again, and the position does not move past it", async () => {
		const seqs = await append(3);
		const seen: number[] = [];
		const positionsAtFailure: number[] = [];
		let failures = 0;
		const c = await collect(stream, "retry", seen, (rec, self) => {
			if (rec.seq !== seqs[1] || failures >= 2) return false;
			failures++;
			positionsAtFailure.push(self.position());
			return true;
		});
		await waitFor(() => seen.length === 3, "three events handled");
		expect(failures).toBe(2);
		// While the second event failed, the group stayed right after the first; nothing after it was handled.
		expect(positionsAtFailure).toEqual([seqs[0], seqs[0]]);
		expect(seen).toEqual(seqs);
		expect(c.position()).toBe(seqs[2]);
	});

	test("a consumer stopped while an event keeps failing leaves the position before it; the next one gets it", async () => {
		const seqs = await append(2);
		const seen: number[] = [];
		let calls = 0;
		const first = await collect(stream, "stuck", seen, (rec) => rec.seq === seqs[1] && ++calls > 0);
		await waitFor(() => calls >= 1 && seen.length === 1, "the first event handled and the second failing");
		await first.stop();
		expect(first.position()).toBe(seqs[0]);
		await stream.close();

		stream = new OutboxStream(cfg);
		const again: number[] = [];
		await collect(stream, "stuck", again);
		await waitFor(() => again.length === 1, "the failed event delivered again");
		expect(again).toEqual([seqs[1]]);
	});

	test("a group resumes from its saved position after stop and start: nothing lost, nothing skipped", async () => {
		const before = await append(3);
		const seen: number[] = [];
		const c = await collect(stream, "resume", seen);
		await waitFor(() => seen.length === 3, "the first three");
		await c.stop();
		consumers.splice(consumers.indexOf(c), 1);
		await stream.close();

		// Written while the group is down.
		const during = await append(3);
		stream = new OutboxStream(cfg);
		const later: number[] = [];
		await collect(stream, "resume", later);
		const after = await append(2);
		await waitFor(() => later.length === 5, "the five written since the stop");
		await new Promise((r) => setTimeout(r, 600));
		expect(seen).toEqual(before);
		expect(later).toEqual([...during, ...after]);
	});

	test("a new group reads the outbox from its beginning", async () => {
		const early = await append(4);
		const first: number[] = [];
		await collect(stream, "first", first);
		await waitFor(() => first.length === 4, "the first group");
		const late: number[] = [];
		await collect(stream, "late-comer", late);
		await waitFor(() => late.length === 4, "the new group");
		expect(late).toEqual(early);
	});

	test("batches: the backlog in stream order, at most maxBatch records per call, resumed after the last batch", async () => {
		const seqs = await append(25);
		const batches: number[][] = [];
		const c = await stream.consumeBatches("batched", async (recs) => void batches.push(recs.map((r) => r.seq)), { maxBatch: 10 });
		consumers.push(c);
		await waitFor(() => batches.flat().length === 25, "the 25 records");
		expect(batches.map((b) => b.length)).toEqual([10, 10, 5]);
		expect(batches.flat()).toEqual(seqs);
		expect(c.position()).toBe(seqs[24]);
		// Stored durably: another stream over the same data resumes after the last batch.
		await c.stop();
		consumers.splice(consumers.indexOf(c), 1);
		await stream.close();
		stream = new OutboxStream(cfg);
		const later = await append(2);
		const again: number[] = [];
		consumers.push(await stream.consumeBatches("batched", async (recs) => void again.push(...recs.map((r) => r.seq))));
		await waitFor(() => again.length === 2, "the two written since");
		expect(again).toEqual(later);
	});

	test("a moving group stores its position at most every 250 ms, never a batch's worth behind, and the last one soon after", async () => {
		const c = await stream.consumeBatches("lazy", async () => undefined, { maxBatch: 10 });
		consumers.push(c);
		const offsets = (stream as unknown as { offsets: { setOne(id: string, doc: Record<string, unknown>): Promise<unknown> } }).offsets;
		const setOne = offsets.setOne.bind(offsets);
		const writes: Array<{ seq: number }> = [];
		offsets.setOne = (id, doc) => {
			if (id === "lazy") writes.push({ seq: Number(doc.seq) });
			return setOne(id, doc);
		};
		// Single appends, one about every 5 ms: a stream of small batches (one store per batch would be dozens).
		const seqs: number[] = [];
		for (let i = 0; i < 60; i++) {
			seqs.push(...(await append(1)));
			await sleep(5);
		}
		await waitFor(() => c.position() === seqs.at(-1), "every record handled");
		await waitFor(() => writes.at(-1)?.seq === seqs.at(-1), "the last position stored", 2000);
		const moves = writes.filter((w, i) => i === 0 || w.seq !== writes[i - 1].seq);
		// By time alone (about 0.5 s of appends): 3 to 4; by the batch's worth (60 positions, 10 a batch): at most 6 more.
		expect(moves.length).toBeLessThanOrEqual(12);
		expect(moves.length).toBeGreaterThanOrEqual(2);
		// Never a batch's worth (10) handled and not stored: consecutive stored positions are less than two batches apart
		// (the store is made once 10 are handled, after the batch that reached them). By time alone they would be about
		// 40 apart (an append every 5 to 7 ms).
		for (let i = 1; i < moves.length; i++) expect(seqs.indexOf(moves[i].seq) - seqs.indexOf(moves[i - 1].seq)).toBeLessThanOrEqual(19);
	});

	test("a batch that throws comes back whole, and the position stays before it until it succeeds", async () => {
		const seqs = await append(4);
		const calls: number[][] = [];
		const positions: number[] = [];
		// The handler waits for the consumer: the first batch may be read before consumeBatches answers.
		let started!: () => void;
		const ready = new Promise<void>((r) => (started = r));
		const c: Consumer = await stream.consumeBatches(
			"batch-retry",
			async (recs) => {
				await ready;
				calls.push(recs.map((r) => r.seq));
				if (calls.length <= 2) {
					positions.push(c?.position() ?? -1);
					throw new Error("not now");
				}
			},
			{ maxBatch: 3 },
		);
		started();
		consumers.push(c);
		await waitFor(() => calls.flat().length >= 10, "the retried batch and the rest");
		expect(calls).toEqual([seqs.slice(0, 3), seqs.slice(0, 3), seqs.slice(0, 3), [seqs[3]]]);
		expect(positions).toEqual([0, 0]);
		await waitFor(() => c!.position() === seqs[3], "the position at the end");
	});

	test("two groups each see every event, in order", async () => {
		const a: number[] = [];
		const b: number[] = [];
		await collect(stream, "group-a", a);
		await collect(stream, "group-b", b);
		const seqs = [...(await append(5)), ...(await append(5))];
		await waitFor(() => a.length === 10 && b.length === 10, "both groups");
		expect(a).toEqual(seqs);
		expect(b).toEqual(seqs);
	});
});

describe("embedded stream across a full platform restart", () => {
	let p: TestPlatform;
	beforeAll(async () => {
		p = await bootPlatform();
	});
	afterAll(() => p.cleanup());

	test("events written before, during and after a restart reach the group once each, in order", async () => {
		const token = await p.rootToken();
		const notes = (recs: OutboxRecord[]) => recs.filter((r) => r.event.topic === "content.notes");
		const create = async (title: string) => {
			const r = await p.http("POST", "/content/notes", { token, body: { title } });
			expect(r.status).toBe(200);
			return r.body.data.id as string;
		};

		const first: OutboxRecord[] = [];
		let c = await sharedStream(p.cfg).consume("restart-probe", async (rec) => void first.push(rec));
		const a = await create("a");
		const b = await create("b");
		await waitFor(() => notes(first).length === 2, "the first two notes");
		expect(notes(first).map((r) => [r.event.op, r.event.id])).toEqual([
			["c", a],
			["c", b],
		]);
		await c.stop();

		const down = await create("written while the group is down");
		await p.restart();
		const token2 = await p.rootToken();
		const after = await p.http("POST", "/content/notes", { token: token2, body: { title: "after the restart" } });
		expect(after.status).toBe(200);

		const second: OutboxRecord[] = [];
		c = await sharedStream(p.cfg).consume("restart-probe", async (rec) => void second.push(rec));
		await waitFor(() => notes(second).length === 2, "the notes written since the stop");
		await new Promise((r) => setTimeout(r, 600));
		await c.stop();
		expect(notes(second).map((r) => r.event.id)).toEqual([down, after.body.data.id]);
		// Positions only grow: the second run starts after everything the first one handled.
		expect(Math.min(...second.map((r) => r.seq))).toBeGreaterThan(Math.max(...first.map((r) => r.seq)));
	});
});
