/**
 * Webhook throughput and delay: a platform child process delivers change events to a local receiver (127.0.0.1);
 * deliveries per second over a burst of writes, and the delay from the write (event ts_ms) to receipt.
 */
import http from "http";
import type { AddressInfo } from "net";

export interface WebhookRow {
	deliveries: number;
	perSecond: number;
	p50: number;
	p99: number;
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];

/** A local receiver counting deliveries of content.notes events and their delay since the write. */
async function receiver() {
	const delays: number[] = [];
	let first = 0;
	let last = 0;
	let waiters: Array<{ n: number; resolve: () => void }> = [];
	const server = http.createServer((req, res) => {
		const chunks: Buffer[] = [];
		req.on("data", (c) => chunks.push(c));
		req.on("end", () => {
			res.writeHead(204).end();
			const ev = JSON.parse(Buffer.concat(chunks).toString());
			if (ev.topic !== "content.notes") return;
			const now = Date.now();
			first ||= now;
			last = now;
			delays.push(now - ev.ts_ms);
			waiters = waiters.filter((w) => (delays.length >= w.n ? (w.resolve(), false) : true));
		});
	});
	await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
	return {
		url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
		reset() {
			delays.length = 0;
			first = last = 0;
		},
		/** Resolves when `n` deliveries arrived, or after `ms`. */
		wait(n: number, ms = 120_000) {
			return Promise.race([new Promise<void>((resolve) => (delays.length >= n ? resolve() : waiters.push({ n, resolve }))), new Promise<void>((r) => setTimeout(r, ms).unref())]);
		},
		result(): WebhookRow {
			const sorted = [...delays].sort((a, b) => a - b);
			return { deliveries: delays.length, perSecond: Math.round(delays.length / Math.max(0.001, (last - first) / 1000)), p50: pct(sorted, 50), p99: pct(sorted, 99) };
		},
		close: () => server.close(),
	};
}

/**
 * Run against a platform with no backlog. Paced: single writes at ~50/s, the delay is delivery latency. Burst:
 * bulk writes as fast as the API takes them, deliveries per second is the dispatcher's throughput.
 */
export async function webhookBench(base: string, token: string, clientId: string): Promise<{ paced: WebhookRow; burst: WebhookRow }> {
	const rx = await receiver();
	const auth = { authorization: `Bearer ${token}`, "content-type": "application/json" };
	const cfg = await fetch(`${base}/context/configs`, { method: "POST", headers: auth, body: JSON.stringify({ key: "CQRS", eid: clientId, value: { webhook: rx.url, secret: "bench-secret" } }) });
	if (cfg.status !== 200) throw new Error(`CQRS config: ${cfg.status} ${await cfg.text()}`);
	try {
		const PACED = 500;
		for (let i = 0; i < PACED; i++) {
			await fetch(`${base}/content/notes`, { method: "POST", headers: auth, body: JSON.stringify({ title: `paced ${i}` }) });
			await new Promise((r) => setTimeout(r, 20));
		}
		await rx.wait(PACED);
		const paced = rx.result();
		rx.reset();
		const BURST = 2000;
		for (let i = 0; i < BURST; i += 100) {
			const items = Array.from({ length: 100 }, (_, j) => ({ title: `burst ${i + j}` }));
			await fetch(`${base}/content/notes/bulk`, { method: "POST", headers: auth, body: JSON.stringify({ items }) });
		}
		await rx.wait(BURST);
		return { paced, burst: rx.result() };
	} finally {
		rx.close();
	}
}
