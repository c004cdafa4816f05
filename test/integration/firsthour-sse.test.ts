/**
 * Issue 13 item 11: the cursor honours Last-Event-ID. A standard EventSource that reconnects sends the id of the
 * last event it received; the stream resumes after that document instead of replaying everything.
 */
import { bootPlatform, parseSse, type TestPlatform } from "../helpers/platform";

let p: TestPlatform;
let root: string;
const ids: string[] = [];

beforeAll(async () => {
	p = await bootPlatform();
	root = await p.rootToken();
	for (let i = 0; i < 5; i++) {
		const r = await p.http("POST", "/content/notes", { token: root, body: { title: `sse ${i}` } });
		ids.push(r.body.data.id);
	}
});
afterAll(() => p.cleanup());

const cursor = (headers: Record<string, string> = {}) => p.http("GET", "/content/notes/cursor", { token: root, headers });
const dataIds = (text: string) =>
	parseSse(text)
		.filter((f) => f.id)
		.map((f) => f.id);

test("without Last-Event-ID: every document, then end", async () => {
	const r = await cursor();
	expect(dataIds(r.text)).toEqual(ids);
	expect(parseSse(r.text).at(-1)).toEqual({ event: "end", data: "close" });
});

test("with Last-Event-ID: only the documents after it", async () => {
	const r = await cursor({ "last-event-id": ids[1] });
	expect(r.status).toBe(200);
	expect(dataIds(r.text)).toEqual(ids.slice(2));
	expect(parseSse(r.text).at(-1)).toEqual({ event: "end", data: "close" });
});

test("a reconnect after the last document gets nothing again, just the end", async () => {
	const r = await cursor({ "last-event-id": ids[4] });
	expect(dataIds(r.text)).toEqual([]);
	expect(parseSse(r.text).at(-1)).toEqual({ event: "end", data: "close" });
});

test("an id that is not in the cursor: an error frame that says how to start over", async () => {
	const r = await cursor({ "last-event-id": "0123456789abcdef01234567" });
	expect(dataIds(r.text)).toEqual([]);
	const last = parseSse(r.text).at(-1)!;
	expect(last.event).toBe("error");
	expect(JSON.parse(last.data)).toEqual({
		statusCode: 404,
		message: "Last-Event-ID 0123456789abcdef01234567 is not among this cursor's documents; reconnect without it to start over",
		error: "Not Found",
	});
});

test("a Last-Event-ID that is not a document id: 400 before the stream", async () => {
	const r = await cursor({ "last-event-id": "nope" });
	expect(r.status).toBe(400);
	expect(r.body).toEqual({ statusCode: 400, message: "Last-Event-ID must be the id of a document of this cursor (24 hex digits)", error: "Bad Request" });
});
