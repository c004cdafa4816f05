/**
 * The gateway's audit shipper (events/audit-shipper.ts): entries leave in batches, a batch the stream refused is
 * sent again under the same id (JetStream de-duplicates on it) until accepted, the buffer is bounded, and closing
 * sends what is left.
 */
import { AuditShipper, type ShipperOptions } from "../../events/audit-shipper";
import type { AuditBatch } from "../../events/audit-spool";
import type { AuditRequest } from "../../lib/audit";
import { waitFor } from "../helpers/wait";

const entry = (n: number): AuditRequest => ({ request_id: `r${n}`, at: Date.now(), method: "GET", path: `/p/${n}`, status: 200 });
const opts = (o: Partial<ShipperOptions> = {}): ShipperOptions => ({ flushMs: 5, maxBatch: 3, maxBuffered: 100, maxBackoffMs: 20, warn: () => undefined, ...o });

test("entries leave in batches of at most maxBatch, each entry once, in order", async () => {
	const got: AuditBatch[] = [];
	const s = new AuditShipper(async (b) => void got.push(b), opts());
	for (let i = 0; i < 8; i++) s.push(entry(i));
	await waitFor(() => s.shipped === 8, "8 shipped");
	expect(got.map((b) => b.entries.map((e) => e.request_id))).toEqual([
		["r0", "r1", "r2"],
		["r3", "r4", "r5"],
		["r6", "r7"],
	]);
	expect(new Set(got.map((b) => b.id)).size).toBe(3);
	expect(s.pending).toBe(0);
});

test("under a steady load a batch carries flushMs of entries: one send per flushMs, not one per send's duration", async () => {
	const got: AuditBatch[] = [];
	// Each send takes 2 ms; an entry arrives every millisecond or so for 400 ms.
	const s = new AuditShipper(
		async (b) => {
			got.push(b);
			await new Promise((r) => setTimeout(r, 2));
		},
		opts({ flushMs: 50, maxBatch: 10_000 }),
	);
	let n = 0;
	const until = Date.now() + 400;
	while (Date.now() < until) {
		s.push(entry(n++));
		await new Promise((r) => setTimeout(r, 1));
	}
	await waitFor(() => s.shipped === n, `${n} shipped`);
	// 400 ms at one send per 50 ms: about 8 (a send per 2 ms send would make well over 50).
	expect(got.length).toBeLessThanOrEqual(12);
	expect(got.flatMap((b) => b.entries.map((e) => e.request_id))).toEqual(Array.from({ length: n }, (_, i) => `r${i}`));
});

test("a full batch leaves at once, without waiting flushMs", async () => {
	const got: AuditBatch[] = [];
	const s = new AuditShipper(async (b) => void got.push(b), opts({ flushMs: 60_000, maxBatch: 3 }));
	for (let i = 0; i < 3; i++) s.push(entry(i));
	s.push(entry(3));
	// The first kick is flushMs away; close sends both batches now.
	expect(got).toEqual([]);
	expect(await s.close()).toBe(0);
	expect(got.map((b) => b.entries.length)).toEqual([3, 1]);
});

test("a refused batch is retried under the same id, and nothing is lost meanwhile", async () => {
	const attempts: AuditBatch[] = [];
	let down = true;
	const warnings: string[] = [];
	const s = new AuditShipper(
		async (b) => {
			attempts.push(b);
			if (down) throw new Error("event stream not connected");
		},
		opts({ warn: (m) => warnings.push(m) }),
	);
	s.push(entry(1));
	s.push(entry(2));
	await waitFor(() => attempts.length >= 3, "3 attempts");
	s.push(entry(3));
	s.push(entry(4));
	expect(s.pending).toBe(4);
	down = false;
	await waitFor(() => s.shipped === 4, "4 shipped");
	const first = attempts[0].id;
	const ok = attempts.filter((b) => b.id === first);
	expect(ok.length).toBeGreaterThanOrEqual(4);
	for (const b of ok) expect(b.entries.map((e) => e.request_id)).toEqual(["r1", "r2"]);
	expect(attempts.at(-1)!.entries.map((e) => e.request_id)).toEqual(["r3", "r4"]);
	expect(warnings[0]).toMatch(/^audit entries not yet stored in the event stream \(event stream not connected\); 2 waiting, retrying$/);
});

test("the buffer is bounded: the oldest tenth goes when full, counted and reported", async () => {
	const warnings: string[] = [];
	const s = new AuditShipper(async () => Promise.reject(new Error("down")), opts({ maxBuffered: 20, maxBatch: 5, warn: (m) => warnings.push(m) }));
	for (let i = 0; i < 40; i++) s.push(entry(i));
	expect(s.dropped).toBeGreaterThanOrEqual(18);
	expect(s.pending).toBeLessThanOrEqual(21);
	expect(warnings.some((w) => /^audit buffer full \(20 entries, event stream unreachable\): 2 oldest entries dropped/.test(w))).toBe(true);
	expect(await s.close(50)).toBe(s.pending);
});

test("close sends what is buffered; later entries are ignored", async () => {
	const got: string[] = [];
	const s = new AuditShipper(async (b) => void got.push(...b.entries.map((e) => e.request_id!)), opts({ flushMs: 10_000 }));
	for (let i = 0; i < 7; i++) s.push(entry(i));
	expect(await s.close()).toBe(0);
	s.push(entry(99));
	expect(got).toEqual(["r0", "r1", "r2", "r3", "r4", "r5", "r6"]);
	expect(s.pending).toBe(0);
});
