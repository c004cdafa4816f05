/**
 * `/cursor` limits (docs/contracts.md "Limits the platform keeps"): at most 8 open streams per principal (the 9th: 429
 * `too many open cursors` before any SSE header); a stream whose client reads nothing for CURSOR_IDLE_MS (30 s,
 * 10 s here) is closed and its slot freed. The window is that long because the 8 streams open one after the other:
 * on a loaded machine (CI) the first had been idle for longer than a 4 s window before the ninth was counted. (Opened
 * together, their 8 cuts come at the same moment, which the /status probe must not see either.)
 */
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { errorBody, sleep } from "../helpers/auth";
import { unique } from "../helpers/samples";
import { bigNotes, otherPrincipals, stalledStream, type Stalled } from "../helpers/stall";
import { withStatusProbe } from "../helpers/status-probe";

const IDLE_MS = 10_000;
let p: TestPlatform;
let token: string;
let path: string;

const openOf = () => (p.broker.getLocalService("api") as any).openCursors as Map<string, number>;

beforeAll(async () => {
	p = await bootPlatform({ cursorIdleMs: IDLE_MS });
	token = await p.rootToken();
	const tag = `stall-${unique()}`;
	// ~12 MB of documents: more than the socket buffers of a client that does not read.
	await bigNotes(p, token, tag, 240, 50);
	path = `/content/notes/cursor?query=${encodeURIComponent(JSON.stringify({ tags: tag }))}`;
}, 60_000);
afterAll(() => p?.cleanup());
withStatusProbe(() => p.url);

test("8 open streams per principal; the 9th → 429 in the error shape, no SSE header; another principal is not affected", async () => {
	const held: Stalled[] = [];
	try {
		for (let i = 0; i < 8; i++) {
			const s = await stalledStream(p.url, path, token);
			held.push(s);
			expect(s.status).toBe(200);
			expect(s.contentType).toMatch(/^text\/event-stream/);
		}
		const ninth = await stalledStream(p.url, path, token);
		expect(ninth.status).toBe(429);
		expect(ninth.contentType).toMatch(/^application\/json/);
		expect(ninth.body).toEqual(errorBody(429, "too many open cursors"));
		const other = await stalledStream(p.url, path, (await otherPrincipals(p, token, 1))[0]);
		held.push(other);
		expect(other.status).toBe(200);
	} finally {
		for (const s of held) s.destroy();
	}
	// Slots are freed when the clients go: the principal may open streams again.
	await waitFor(() => openOf().size === 0, 5000);
	const again = await stalledStream(p.url, path, token);
	expect(again.status).toBe(200);
	again.destroy();
	await waitFor(() => openOf().size === 0, 5000);
}, 60_000);

test("a client that reads nothing is cut off after CURSOR_IDLE_MS and its slot freed", async () => {
	const held: Stalled[] = [];
	try {
		for (let i = 0; i < 8; i++) held.push(await stalledStream(p.url, path, token));
		expect(held.map((s) => s.status)).toEqual(Array(8).fill(200));
		expect([...openOf().values()]).toEqual([8]);
		expect((await stalledStream(p.url, path, token)).status).toBe(429);
		// The clients still hold their sockets but read nothing: the gateway closes the streams itself.
		await waitFor(() => openOf().size === 0, IDLE_MS + 5000);
		const s = await stalledStream(p.url, path, token);
		held.push(s);
		expect(s.status).toBe(200);
	} finally {
		for (const s of held) s.destroy();
	}
}, 60_000);

async function waitFor(cond: () => boolean, ms: number): Promise<void> {
	const until = Date.now() + ms;
	while (!cond()) {
		if (Date.now() > until) throw new Error("condition not reached");
		await sleep(50);
	}
}
