/**
 * A stopping gateway ends its live cursors first (middlewares/node-stopping.ts): an open live stream is a request the
 * broker tracks, and without the early end the node's stop waited out tracking's whole shutdown timeout (10 s)
 * before the gateway's `stopped` closed the streams. The stream's client sees its end, and the stop does not wait.
 * On each document store.
 */
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { openStream } from "../helpers/live-sse";
import { STORES } from "../helpers/tenants";

jest.setTimeout(60_000);

describe.each(STORES)("a stopping gateway on %s", (store) => {
	let p: TestPlatform | undefined;
	afterAll(async () => {
		await p?.stop().catch(() => undefined);
	});

	test("ends its live cursors at once instead of waiting out the shutdown timeout", async () => {
		p = await bootPlatform({ documentStore: store });
		const token = await p.rootToken();
		const streams = await Promise.all([0, 1].map(() => openStream(`${p!.url}/content/notes/cursor?live=true`, { authorization: `Bearer ${token}` })));
		for (const s of streams) {
			expect(s.status).toBe(200);
			await s.waitFor((f) => f.event === "live");
		}
		const started = Date.now();
		const stopping = p.stop();
		await Promise.all(streams.map((s) => s.ended));
		await stopping;
		p = undefined;
		// The broker's tracking timeout is 10 s (moleculer.config.ts); a stop held by the streams takes at least that.
		expect(Date.now() - started).toBeLessThan(8_000);
	});
});
