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
	// Each frame's data is the document (its keys in the store's order, which need not be the create's).
	const frames = parseSse(s.text).map((f) => (f.event ? f : { ...f, data: JSON.parse(f.data) }));
	expect(frames).toEqual([
		{ id: c.body.data.id, data: c.body.data },
		{ event: "end", data: "close" },
	]);
});

test("GET /status reports every domain, every worker and each dependency in use; GET /metrics is Prometheus text", async () => {
	const { DOMAINS } = await import("../../catalog");
	const { WORKER_PORTS } = await import("../../workers");
	const s = await p.http("GET", "/status");
	expect(s.status).toBe(200);
	expect(s.body.status).toBe("ok");
	for (const name of [...DOMAINS.map((d) => d.name), ...Object.keys(WORKER_PORTS)]) expect(s.body.info[`service:${name}`]).toEqual({ status: "up" });
	for (const dep of ["cache", "event stream", "relational store"]) expect(s.body.info[dep]).toEqual({ status: "up" });
	expect(s.body.info["document store"]).toEqual({ status: "up", kind: "postgres" });
	const m = await p.http("GET", "/metrics");
	expect(m.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
	expect(m.text).toMatch(/^# TYPE gateway_http_requests_total counter$/m);
	expect(m.text).toMatch(/^gateway_http_request_duration_bucket\{.*route="\/content\/notes".*\} \d+$/m);
});
