/**
 * A stopping gateway ends its live cursors first (runtime/node-stopping.ts): an open live stream is a request the
 * broker tracks, and without the early end the node's stop waited out tracking's whole shutdown timeout (10 s)
 * before the gateway's `stopped` closed the streams. Each stream ends with a frame that sets its client's reconnection
 * delay (`retry:`), and one asked for once the gateway is stopping is closed at once with it, unlisted: before, such a
 * stream stayed open and held the stop for the whole timeout.
 * Clients that keep their keep-alive connections busy do not hold it either (services/api/drain.ts): before, the
 * gateway's `server.close()` waited for connections that never went idle, and a SIGTERM under load never ended.
 * On each document store.
 */
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { openStream } from "../helpers/live-sse";
import { CLOSING_FRAME } from "../../services/api/live-cursor";

jest.setTimeout(60_000);

describe("a stopping gateway", () => {
	let p: TestPlatform | undefined;
	afterAll(async () => {
		await p?.stop().catch(() => undefined);
	});

	test("ends its live cursors and the keep-alive connections its clients keep busy, instead of waiting on them", async () => {
		p = await bootPlatform({});
		const token = await p.rootToken();
		const streams = await Promise.all([0, 1].map(() => openStream(`${p!.url}/content/notes/cursor?live=true`, { authorization: `Bearer ${token}` })));
		for (const s of streams) {
			expect(s.status).toBe(200);
			await s.waitFor((f) => f.event === "live");
		}
		// Four clients that send their next request as soon as the last is answered, each on its kept-alive connection.
		const url = `${p.url}/content/notes?pagination=${encodeURIComponent(JSON.stringify({ limit: 1 }))}`;
		let started = 0;
		let done = false;
		const busy = async (): Promise<string[]> => {
			const seen: string[] = [];
			while (!done) {
				const r = await fetch(url, { headers: { authorization: `Bearer ${token}` } }).catch(() => undefined);
				if (!r) break; // the gateway no longer listens
				await r.arrayBuffer();
				if (started) seen.push(r.headers.get("connection") ?? "keep-alive");
			}
			return seen;
		};
		const clients = Promise.all([0, 1, 2, 3].map(busy));
		await new Promise((r) => setTimeout(r, 300));
		started = Date.now();
		const stopping = p.stop().then(() => Date.now() - started);
		await Promise.all(streams.map((s) => s.ended));
		for (const s of streams) expect(s.text().endsWith(`\n\n${CLOSING_FRAME}`)).toBe(true);
		// The broker's tracking timeout is 10 s (moleculer.config.ts); a stop held by the streams takes at least that,
		// and one held by busy connections did not end at all.
		const took = await Promise.race([stopping, new Promise<number>((r) => setTimeout(() => r(Infinity), 8_000))]);
		done = true;
		const seen = await clients;
		await stopping;
		p = undefined;
		expect(took).toBeLessThan(8_000);
		// What the stopping gateway answered told its client to close the connection, but for the request each
		// client had in flight when the stop began.
		for (const s of seen) expect(s.slice(1).filter((c) => c !== "close")).toEqual([]);
	});

	test("once stopping, a live cursor asked for is answered with the closing frame at once, without its listing", async () => {
		p = await bootPlatform({});
		const token = await p.rootToken();
		expect((await p.http("POST", "/content/notes", { token, body: { title: "listed otherwise" } })).status).toBe(200);
		// The gateway's stop as NODE_STOPPING begins it, its listener still open (a request on a kept-alive connection).
		(p.broker.getLocalService("api") as unknown as { liveCursors: { endStreams(): void } }).liveCursors.endStreams();
		const s = await openStream(`${p.url}/content/notes/cursor?live=true`, { authorization: `Bearer ${token}` });
		await Promise.race([s.ended, new Promise((r) => setTimeout(r, 5000))]);
		expect([s.status, s.headers["content-type"], s.text()]).toEqual([200, "text/event-stream; charset=utf-8", CLOSING_FRAME]);
		await p.stop();
		p = undefined;
	});
});
