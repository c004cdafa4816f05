import { bootPlatform, parseSse, type TestPlatform } from "../helpers/platform";

let p: TestPlatform;
beforeAll(async () => {
	p = await bootPlatform();
});
afterAll(() => p.cleanup());

test("root logs in, creates, lists and streams a note", async () => {
	const token = await p.rootToken();
	const c = await p.http("POST", "/content/notes", { token, body: { title: "hello" } });
	expect(c.status).toBe(200);
	expect(c.body.data).toMatchObject({ title: "hello", version: "1.0.0", deleted_at: null });
	expect(c.body.data.id).toMatch(/^[0-9a-f]{24}$/);
	const l = await p.http("GET", "/content/notes", { token });
	expect(l.body).toEqual({ items: [c.body.data], total: 1 });
	const s = await p.http("GET", "/content/notes/cursor", { token, headers: { accept: "text/event-stream" } });
	expect(s.headers.get("content-type")).toMatch(/text\/event-stream/);
	const frames = parseSse(s.text);
	expect(frames).toEqual([
		{ id: c.body.data.id, data: JSON.stringify(c.body.data) },
		{ event: "end", data: "close" },
	]);
});
