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

export async function webhookBench(base: string, token: string, clientId: string, count = 2000): Promise<WebhookRow> {
	const delays: number[] = [];
	let first = 0;
	let last = 0;
	let done: () => void = () => undefined;
	const finished = new Promise<void>((r) => (done = r));
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
			if (delays.length >= count) done();
		});
	});
	await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
	const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
	const auth = { authorization: `Bearer ${token}`, "content-type": "application/json" };
	const cfg = await fetch(`${base}/context/configs`, { method: "POST", headers: auth, body: JSON.stringify({ key: "CQRS", eid: clientId, value: { webhook: url, secret: "bench-secret" } }) });
	if (cfg.status !== 200) throw new Error(`CQRS config: ${cfg.status} ${await cfg.text()}`);
	// Writes spread over time, so the delay measures delivery, not a queue built by one giant burst.
	for (let i = 0; i < count; i += 100) {
		const items = Array.from({ length: 100 }, (_, j) => ({ title: `hook ${i + j}` }));
		await fetch(`${base}/content/notes/bulk`, { method: "POST", headers: auth, body: JSON.stringify({ items }) });
	}
	const timeout = new Promise<void>((r) => setTimeout(r, 120_000).unref());
	await Promise.race([finished, timeout]);
	server.close();
	const sorted = [...delays].sort((a, b) => a - b);
	return { deliveries: delays.length, perSecond: Math.round(delays.length / Math.max(0.001, (last - first) / 1000)), p50: pct(sorted, 50), p99: pct(sorted, 99) };
}
