/**
 * Query parameters a route does not take answer 400 naming them and the accepted ones (services/api/query-params.ts),
 * where `GET /content/notes?limit=20` answered the default page of 10 without a word; the accepted ones are exactly
 * the operation's query parameters in the OpenAPI document; and what clients legitimately send keeps working (the
 * list's parameters, `?token=` for EventSource, `?lastEventId=` as EventSource polyfills add it on a reconnect, `?ref=`,
 * the gateway's own pages).
 */
import { bootPlatform, parseSse, type HttpResult, type TestPlatform } from "../helpers/platform";

let p: TestPlatform;
let root: string;
const q = (v: unknown) => encodeURIComponent(JSON.stringify(v));
const LIST = "query, pagination, projection, populate, zone, token";

beforeAll(async () => {
	p = await bootPlatform();
	root = await p.rootToken();
}, 120_000);
afterAll(() => p?.cleanup());

const bad = (message: string) => ({ status: 400, body: { statusCode: 400, message, error: "Bad Request" } });
const answer = (r: HttpResult) => ({ status: r.status, body: r.body });

test("an unknown parameter answers 400 naming it and what the endpoint takes, on every kind of route", async () => {
	const note = (await p.http("POST", "/content/notes", { token: root, body: { title: "q-params" } })).body.data;
	const cases: Array<[string, string, string]> = [
		["GET", "/content/notes?limit=20", `unknown query parameter limit; accepted: ${LIST}`],
		["GET", "/content/notes/count?query=%7B%7D&limit=1&sort=2", `unknown query parameters limit, sort; accepted: ${LIST}`],
		["GET", `/content/notes/cursor?sort=${q({ title: 1 })}`, `unknown query parameter sort; accepted: ${LIST.replace(", token", ", live, last_event_id, lastEventId, token")}`],
		["GET", `/content/notes/${note.id}?query=${q({ title: "x" })}`, "unknown query parameter query; accepted: ref, projection, populate, zone, token"],
		["POST", "/content/notes?zone=own", "unknown query parameter zone; accepted: token"],
		["PATCH", `/content/notes/${note.id}?projection=${q({ title: 1 })}`, "unknown query parameter projection; accepted: zone, token"],
		["PATCH", `/content/notes/bulk?query=${q({ id: note.id })}&pagination=${q({ limit: 1 })}`, "unknown query parameter pagination; accepted: query, zone, token"],
		["GET", "/content/posts/search?q=x&limit=3", "unknown query parameter limit; accepted: query, pagination, zone, token, q"],
		["GET", "/essential/sagas/0123456789abcdef01234567/abort?query=%7B%7D", "unknown query parameter query; accepted: zone, token"],
		["POST", "/auth/token?grant_type=password", "unknown query parameter grant_type; this endpoint takes none"],
		["GET", "/auth/verify?access_token=abc", "unknown query parameter access_token; accepted: token"],
		["GET", "/special/files/0123456789abcdef01234567/download?key=k&name=x", "unknown query parameter name; accepted: key, token"],
	];
	for (const [method, path, message] of cases) expect({ method, path, ...answer(await p.http(method, path, { token: root })) }).toEqual({ method, path, ...bad(message) });
	// The name is cut in the message; nothing was written by the refused create.
	const long = `x${"y".repeat(200)}`;
	expect(answer(await p.http("POST", `/content/notes?${long}=1`, { token: root, body: { title: "never" } }))).toEqual(
		bad(`unknown query parameter ${long.slice(0, 64)}...; accepted: token`),
	);
	expect((await p.http("GET", `/content/notes/count?query=${q({ title: "never" })}`, { token: root })).body).toEqual({ total: 0 });
});

test("the accepted parameters are the operation's query parameters in the OpenAPI document", async () => {
	const doc = (await p.http("GET", "/api-json")).body as {
		paths: Record<string, Record<string, { parameters?: Array<{ $ref?: string; name?: string; in?: string }> }>>;
		components: { parameters: Record<string, { name: string; in: string }> };
	};
	let checked = 0;
	for (const [path, ops] of Object.entries(doc.paths)) {
		// Every route of a collection is the same pattern: content's, the auth routes, every special action, the files.
		if (!/^\/(content\/notes|auth|special\/files)\b/.test(path) && !/\/\{id\}\/|\/(search|start|add|init|send|resolve|collect|generate|vapid)$/.test(path)) continue;
		for (const [method, op] of Object.entries(ops)) {
			const names = (op.parameters ?? [])
				.map((x) => (x.$ref ? doc.components.parameters[x.$ref.split("/").pop()!] : x))
				.filter((x) => x.in === "query")
				.map((x) => x.name);
			const url = `${path.replace(/\{[^}]+\}/g, "0123456789abcdef01234567")}?zz_unknown=1`;
			const r = await p.http(method.toUpperCase(), url, { token: root });
			const expected = `unknown query parameter zz_unknown; ${names.length ? `accepted: ${names.join(", ")}` : "this endpoint takes none"}`;
			expect({ method, path, ...answer(r) }).toEqual({ method, path, ...bad(expected) });
			checked++;
		}
	}
	expect(checked).toBeGreaterThan(40);
});

test("what clients send legitimately keeps working", async () => {
	const ids: string[] = [];
	for (const title of ["legit-1", "legit-2", "legit-3"]) ids.push((await p.http("POST", "/content/notes", { token: root, body: { title, ref: `ref-${title}` } })).body.data.id);
	const query = q({ title: { $in: ["legit-1", "legit-2", "legit-3"] } });
	const list = await p.http(
		"GET",
		`/content/notes?query=${query}&pagination=${q({ limit: 2, sort: { title: 1 } })}&projection=${q({ title: 1 })}&populate=&zone=own&token=${root}`,
	);
	expect({ status: list.status, titles: list.body.items.map((d: { title: string }) => d.title), total: list.body.total }).toEqual({
		status: 200,
		titles: ["legit-1", "legit-2"],
		total: 3,
	});
	expect(answer(await p.http("GET", `/content/notes/count?query=${query}&zone=own,share`, { token: root }))).toEqual({ status: 200, body: { total: 3 } });
	expect((await p.http("GET", "/content/notes/ref-legit-2?ref=true", { token: root })).body.data.id).toBe(ids[1]);
	// EventSource: the token in the query; a polyfill's reconnect adds lastEventId (the header's meaning).
	const sorted = [...ids].sort();
	const cursor = await p.http("GET", `/content/notes/cursor?query=${query}&token=${root}&lastEventId=${sorted[0]}`);
	expect({ status: cursor.status, ids: parseSse(cursor.text).flatMap((f) => (f.id ? [f.id] : [])) }).toEqual({ status: 200, ids: sorted.slice(1) });
	const both = await p.http("GET", `/content/notes/cursor?query=${query}&lastEventId=${sorted[0]}`, { token: root, headers: { "last-event-id": sorted[1] } });
	expect(parseSse(both.text).flatMap((f) => (f.id ? [f.id] : []))).toEqual(sorted.slice(2));
	expect((await p.http("GET", "/content/posts/search?q=legit&pagination=%7B%22limit%22%3A5%7D", { token: root })).status).toBe(200);
	// The gateway's own pages are not the API's routes: the docs page's own parameters, a probe's.
	expect((await p.http("GET", "/api?urls.primaryName=content")).status).toBe(200);
	expect((await p.http("GET", "/status?probe=1")).status).toBe(200);
});
