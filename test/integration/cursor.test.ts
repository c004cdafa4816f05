/**
 * The SSE cursor (docs/contracts.md "Queries and responses"): many documents streamed in order across the gateway's
 * internal pages, pagination (limit/skip/sort) and query filters honoured like the list, and a client that goes away
 * mid-stream does not hurt the platform.
 */
import http from "http";
import { bootPlatform, parseSse, sseKeysSorted, type TestPlatform } from "../helpers/platform";
import { withStatusProbe } from "../helpers/status-probe";
import { unique } from "../helpers/samples";

const N = 350;
const SSE = { accept: "text/event-stream" };

let p: TestPlatform;
let token: string;
let tag: string;
/** The documents as created, in creation (= id) order. */
let docs: Array<Record<string, any>>;

const q = (v: unknown) => encodeURIComponent(JSON.stringify(v));

beforeAll(async () => {
	p = await bootPlatform();
	token = await p.rootToken();
	tag = `cursor-${unique()}`;
	// Creation order differs from title order, so sorting is observable.
	const items = Array.from({ length: N }, (_, n) => ({
		title: `doc ${String((n * 37) % N).padStart(3, "0")}`,
		content: `body ${n} ${"x".repeat(200)}`,
		tags: [tag, n % 2 === 0 ? "even" : "odd"],
		props: { n },
	}));
	const r = await p.http("POST", "/content/notes/bulk", { token, body: { items } });
	expect(r.status).toBe(200);
	expect(r.body.total).toBe(N);
	docs = r.body.items;
	// A document of another run, outside every filter below.
	expect((await p.http("POST", "/content/notes", { token, body: { title: "doc 000 other", props: { n: 0 } } })).status).toBe(200);
});
afterAll(() => p?.cleanup());
withStatusProbe(() => p.url);

async function stream(params: string) {
	const r = await p.http("GET", `/content/notes/cursor?${params}`, { token, headers: SSE });
	expect(r.status).toBe(200);
	expect(r.headers.get("content-type")).toMatch(/^text\/event-stream/);
	return r;
}

function frames(list: Array<Record<string, any>>): string {
	return list.map((d) => `id: ${d.id}\ndata: ${JSON.stringify(d)}\n\n`).join("") + "event: end\ndata: close\n\n";
}

/** One turn of the event loop. */
const turn = () => new Promise((resolve) => setImmediate(resolve));
const byN = (a: Record<string, any>, b: Record<string, any>) => a.props.n - b.props.n;

test(`${N} documents stream in id order, every one exactly once, then the end frame`, async () => {
	const ids = docs.map((d) => d.id);
	expect([...ids].sort()).toEqual(ids);
	const r = await stream(`query=${q({ tags: tag })}`);
	// The comparisons of 350 documents each take a turn of their own: the /status probe counts this process's
	// synchronous work as the platform's (test/helpers/status-probe.ts).
	const got = sseKeysSorted(r.text);
	await turn();
	expect(got).toBe(sseKeysSorted(frames(docs)));
	await turn();
	const parsed = parseSse(r.text);
	expect(parsed).toHaveLength(N + 1);
	expect(parsed.slice(0, N).map((f) => f.id)).toEqual(ids);
	expect(parsed[N]).toEqual({ event: "end", data: "close" });
	for (let i = 0; i < N; i += 50) {
		await turn();
		expect(parsed.slice(i, Math.min(i + 50, N)).map((f) => JSON.parse(f.data))).toEqual(docs.slice(i, i + 50));
	}
});

test("a filter matching exactly three internal pages (300) ends cleanly", async () => {
	const r = await stream(`query=${q({ tags: tag, "props.n": { $lt: 300 } })}`);
	const got = sseKeysSorted(r.text);
	await turn();
	expect(got).toBe(sseKeysSorted(frames(docs.slice(0, 300))));
});

test("query filters apply: comparison, $in, $regex, $or, $and, $not on id", async () => {
	const cases: Array<[unknown, Array<Record<string, any>>]> = [
		[{ tags: tag, "props.n": { $gte: 340 } }, docs.slice(340)],
		[{ tags: { $in: ["odd"] }, "props.n": { $lt: 10 } }, docs.filter((d) => d.props.n % 2 === 1 && d.props.n < 10)],
		[{ tags: tag, title: { $regex: "^doc 00[0-4]$" } }, docs.filter((d) => /^doc 00[0-4]$/.test(d.title))],
		[{ tags: tag, $or: [{ "props.n": 5 }, { "props.n": 349 }] }, [docs[5], docs[349]]],
		[{ $and: [{ tags: tag }, { tags: "even" }, { "props.n": { $gt: 300 } }] }, docs.filter((d) => d.props.n > 300 && d.props.n % 2 === 0)],
		[{ tags: tag, $not: { id: docs[0].id } }, docs.slice(1)],
		[{ tags: "no-such-tag" }, []],
	];
	for (const [query, expected] of cases) {
		const r = await stream(`query=${q(query)}`);
		const text = sseKeysSorted(r.text);
		await turn();
		expect({ query, text }).toEqual({ query, text: sseKeysSorted(frames(expected)) });
		// The same filter through count and list agrees.
		expect((await p.http("GET", `/content/notes/count?query=${q(query)}`, { token })).body).toEqual({ total: expected.length });
	}
});

test("pagination is honoured like the list: limit, skip, sort", async () => {
	const query = `query=${q({ tags: tag })}`;
	const cases: Array<[Record<string, unknown>, Array<Record<string, any>>]> = [
		[{ limit: 100, skip: 120, sort: { "props.n": -1 } }, [...docs].sort(byN).reverse().slice(120, 220)],
		[{ limit: 7, skip: 3, sort: { title: 1 } }, [...docs].sort((a, b) => a.title.localeCompare(b.title)).slice(3, 10)],
		[{ limit: 5 }, docs.slice(0, 5)],
		[{ skip: 345, limit: 100 }, docs.slice(345)],
		// Without a limit, the list's default page of 10.
		[{ sort: { title: -1 } }, [...docs].sort((a, b) => b.title.localeCompare(a.title)).slice(0, 10)],
		[{ skip: N, limit: 10 }, []],
	];
	for (const [pagination, expected] of cases) {
		const r = await stream(`${query}&pagination=${q(pagination)}`);
		expect({ pagination, text: sseKeysSorted(r.text) }).toEqual({ pagination, text: sseKeysSorted(frames(expected)) });
		const list = await p.http("GET", `/content/notes?${query}&pagination=${q(pagination)}`, { token });
		expect(list.body).toEqual({ items: expected, total: N });
	}
});

test("projection applies to every streamed document", async () => {
	const r = await stream(`query=${q({ tags: tag, "props.n": { $lt: 150 } })}&projection=${q({ title: 1 })}`);
	expect(sseKeysSorted(r.text)).toBe(sseKeysSorted(frames(docs.slice(0, 150).map((d) => ({ id: d.id, title: d.title })))));
});

test("a bad parameter is a plain JSON error before any frame", async () => {
	const r = await p.http("GET", `/content/notes/cursor?pagination=${q({ limit: 101 })}`, { token, headers: SSE });
	expect(r.status).toBe(400);
	expect(r.headers.get("content-type")).toMatch(/^application\/json/);
	expect(r.body).toEqual({ statusCode: 400, message: "pagination.limit must be at most 100", error: "Bad Request" });
});

test("a client that disconnects mid-stream does not crash the platform", async () => {
	const { port } = new URL(p.url);
	for (let round = 0; round < 5; round++) {
		const first = await new Promise<string>((resolve, reject) => {
			const req = http.get({ host: "127.0.0.1", port, path: `/content/notes/cursor?query=${q({ tags: tag })}`, headers: { ...SSE, authorization: `Bearer ${token}` } }, (res) => {
				expect(res.statusCode).toBe(200);
				res.once("data", (chunk: Buffer) => {
					// Gone after the first chunk, while the server still has pages to send.
					req.destroy();
					resolve(chunk.toString("utf8"));
				});
			});
			req.on("error", (e: NodeJS.ErrnoException) => (e.code === "ECONNRESET" ? undefined : reject(e)));
		});
		expect(first.startsWith(`id: ${docs[0].id}\ndata: `)).toBe(true);
	}
	// Give the server a moment to notice the closed sockets, then it must answer normally.
	await new Promise((r) => setTimeout(r, 100));
	const list = await p.http("GET", `/content/notes?query=${q({ tags: tag })}&pagination=${q({ limit: 1 })}`, { token });
	expect(list.status).toBe(200);
	expect(list.body).toEqual({ items: [docs[0]], total: N });
	const status = await p.http("GET", "/status");
	expect(status.status).toBe(200);
	expect(status.body.status).toBe("ok");
	const again = await stream(`query=${q({ tags: tag })}`);
	expect(sseKeysSorted(again.text)).toBe(sseKeysSorted(frames(docs)));
});

test("streaming leaks no listeners on the response", async () => {
	// Long streams wait for `drain` many times; each wait must remove what it attached. Observed on every SSE write.
	const proto = http.ServerResponse.prototype as any;
	const write = proto.write;
	let writes = 0;
	let most = 0;
	proto.write = function (this: http.ServerResponse, ...args: unknown[]) {
		if (String(this.getHeader("content-type") ?? "").startsWith("text/event-stream")) {
			writes++;
			most = Math.max(most, this.listenerCount("close"), this.listenerCount("drain"), this.listenerCount("error"));
		}
		return write.apply(this, args);
	};
	try {
		for (let i = 0; i < 3; i++) await stream(`query=${q({ tags: tag })}`);
	} finally {
		proto.write = write;
	}
	expect(writes).toBeGreaterThanOrEqual(3 * N);
	expect(most).toBeLessThanOrEqual(5);
});
