/**
 * The gateway serves the "api" route's collection actions on its own path (services/api/lean-route.ts), without
 * moleculer-web's `api.rest` action call. Every answer must stay what moleculer-web's handler gives: the same
 * platform is also served, on a second port, by moleculer-web's own httpHandler (the path every request took before),
 * and each request below goes to both. Status, every header but Date (and a generated X-Request-ID, which must be
 * there), and body must be the same; the gateway.* HTTP metrics must count the same. And the lean path must really be
 * the one taken: no `api.rest` call is counted for it.
 */
import http from "http";
import type { AddressInfo } from "net";
import zlib from "zlib";
import ApiGateway from "moleculer-web";
import { bootPlatform, client, type HttpResult, type TestPlatform } from "../helpers/platform";
import { createUser, tokenOf } from "../helpers/auth";
import { metricsText } from "../../runtime/metrics";

let p: TestPlatform;
let reference: http.Server;
let root: string;
/** A token of a user without any grant (403 at the grant layer). */
let noGrant: string;
/** A root token narrowed to read:content:notes (403 at the scope layer on writes). */
let readOnly: string;

const ALICE = { username: "lean-alice", password: "Lean-alice-pw-1" };
const HEX24 = /^[0-9a-f]{24}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

beforeAll(async () => {
	p = await bootPlatform();
	root = await p.rootToken();
	const api = p.broker.getLocalService("api") as unknown;
	const webHandler = (ApiGateway as unknown as { methods: { httpHandler(this: unknown, req: unknown, res: unknown): Promise<void> } }).methods.httpHandler;
	reference = http.createServer((req, res) => void webHandler.call(api, req, res));
	await new Promise<void>((resolve) => reference.listen(0, "127.0.0.1", resolve));
	await createUser(p.http, root, { ...ALICE });
	noGrant = (await tokenOf(p.http, { grant_type: "password", client_id: p.root.client_id, ...ALICE })).access_token;
	readOnly = (await tokenOf(p.http, { grant_type: "password", client_id: p.root.client_id, username: p.root.username, password: p.root.password, scopes: ["read:content:notes"] }))
		.access_token;
});
afterAll(async () => {
	await new Promise((resolve) => reference?.close(resolve));
	await p?.cleanup();
});

interface Req {
	token?: string;
	body?: unknown;
	raw?: string | Buffer;
	headers?: Record<string, string>;
	/** Sent with http.request as is (a path fetch would normalise). */
	plain?: boolean;
}

/** The request through fetch (JSON bodies), or through http.request for a raw Buffer body (content-encoding). */
async function send(base: string, method: string, path: string, r: Req): Promise<HttpResult> {
	if (!Buffer.isBuffer(r.raw) && !r.plain) return client(base)(method, path, { token: r.token, body: r.body, raw: r.raw as string | undefined, headers: r.headers });
	const url = new URL(base + path);
	return new Promise((resolve, reject) => {
		const req = http.request(
			{ host: url.hostname, port: url.port, path: url.pathname + url.search, method, headers: { ...(r.token ? { authorization: `Bearer ${r.token}` } : {}), ...r.headers } },
			(res) => {
				const chunks: Buffer[] = [];
				res.on("data", (c) => chunks.push(c));
				res.on("end", () => {
					const text = Buffer.concat(chunks).toString("utf8");
					const headers = new Headers();
					for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) headers.set(k, Array.isArray(v) ? v.join(", ") : v);
					let body: unknown = text;
					try {
						body = JSON.parse(text);
					} catch {
						/* not JSON */
					}
					resolve({ status: res.statusCode!, headers, body, text });
				});
			},
		);
		req.on("error", reject);
		req.end(r.raw);
	});
}

/** Status, headers (Date left out; a generated X-Request-ID and an ETag checked for their shape, then left out) and body. */
function answer(r: HttpResult, replace: Array<[string, string]> = []) {
	const headers: Record<string, string> = {};
	r.headers.forEach((v, k) => {
		if (k === "date") return;
		// The platform's handler answers every request with `Vary: Origin` (CORS, services/api/cors.ts), the reference
		// has no CORS: checked on the lean side in same(), then left out.
		if (k === "vary" && v === "Origin") return;
		if (k === "x-request-id" && UUID.test(v)) v = "<generated>";
		// Each side reads its own document: a strong tag of the same shape, never the same value.
		if (k === "etag" && /^"[A-Za-z0-9_-]{27}"$/.test(v)) v = "<tag>";
		headers[k] = v;
	});
	let text = r.text;
	for (const [from, to] of replace) {
		text = text.split(from).join(to);
		for (const k of Object.keys(headers)) headers[k] = headers[k].split(from).join(to);
	}
	// What differs between two documents written alike: times, the sample's random fields (each of a fixed length:
	// Content-Length is compared as is).
	text = text
		.replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/g, "<time>")
		.replace(/"rand":"[^"]*"/g, '"rand":"<rand>"')
		.replace(/"timestamp":"\d+"/g, '"timestamp":"<ms>"');
	let body: unknown = text;
	try {
		body = JSON.parse(text);
	} catch {
		/* not JSON */
	}
	return { status: r.status, headers, body };
}

/** `gateway_*` series of /metrics (the HTTP metrics) and the count of `api.rest` calls. */
function series(): { gateway: Map<string, number>; rest: number } {
	const gateway = new Map<string, number>();
	let rest = 0;
	for (const line of metricsText(p.broker).split("\n")) {
		const m = /^(\S+) (\S+)$/.exec(line);
		if (!m) continue;
		if (m[1].startsWith("gateway_")) gateway.set(m[1], Number(m[2]));
		if (m[1].startsWith("moleculer_request_total{") && m[1].includes('action="api.rest"')) rest += Number(m[2]);
	}
	return { gateway, rest };
}

function delta(before: Map<string, number>, after: Map<string, number>): Record<string, number> {
	const out: Record<string, number> = {};
	for (const [k, v] of after) {
		// Durations differ between two requests; their counts and the request counters must not.
		if (/_sum\{|_bucket\{/.test(k)) continue;
		const d = v - (before.get(k) ?? 0);
		if (d !== 0) out[k] = d;
	}
	return out;
}

/**
 * The request on the platform's port (the lean path), then on the reference (moleculer-web's handler): the same
 * answer, the same gateway.* counts, and no api.rest call on the lean side.
 */
async function same(
	method: string,
	path: string | ((side: "lean" | "ref") => string),
	r: Req = {},
	opts: { replace?: (side: "lean" | "ref", res: HttpResult) => Array<[string, string]> } = {},
) {
	const pathOf = (side: "lean" | "ref") => (typeof path === "string" ? path : path(side));
	const s0 = series();
	const lean = await send(p.url, method, pathOf("lean"), r);
	const s1 = series();
	const ref = await send(`http://127.0.0.1:${(reference.address() as AddressInfo).port}`, method, pathOf("ref"), r);
	const s2 = series();
	expect(answer(lean, opts.replace?.("lean", lean))).toEqual(answer(ref, opts.replace?.("ref", ref)));
	expect(lean.headers.get("vary")).toBe("Origin");
	expect(delta(s0.gateway, s1.gateway)).toEqual(delta(s1.gateway, s2.gateway));
	expect(Object.keys(delta(s0.gateway, s1.gateway)).length).toBeGreaterThan(0);
	expect(s1.rest - s0.rest).toBe(0);
	expect(s2.rest - s1.rest).toBe(1);
	return { lean, ref };
}

const q = (v: unknown) => encodeURIComponent(JSON.stringify(v));

describe("the lean path answers as moleculer-web's handler does", () => {
	const ids: Record<"lean" | "ref", string> = { lean: "", ref: "" };
	const byId = (side: "lean" | "ref", res: HttpResult): Array<[string, string]> => [[res.body?.data?.id ?? ids[side], "<id>"]];

	test("create: 200, the document, the same headers", async () => {
		const { lean, ref } = await same("POST", "/content/notes", { token: root, body: { title: "lean path", content: "same answer" } }, { replace: byId });
		expect(lean.status).toBe(200);
		expect(lean.body.data.title).toBe("lean path");
		expect(lean.headers.get("content-type")).toBe("application/json; charset=utf-8");
		expect(lean.headers.get("x-request-id")).toMatch(UUID);
		ids.lean = lean.body.data.id;
		ids.ref = ref.body.data.id;
		expect(ids.lean).toMatch(HEX24);
		expect(ids.ref).toMatch(HEX24);
	});

	test("get by id, list, count", async () => {
		const { lean } = await same("GET", (side) => `/content/notes/${ids[side]}`, { token: root }, { replace: byId });
		expect(lean.status).toBe(200);
		expect(lean.body.data.id).toBe(ids.lean);
		const list = await same("GET", `/content/notes?query=${q({ title: "lean path" })}&pagination=${q({ limit: 5 })}`, { token: root });
		expect(list.lean.status).toBe(200);
		expect(list.lean.body.items.map((d: { id: string }) => d.id).sort()).toEqual([ids.lean, ids.ref].sort());
		const count = await same("GET", `/content/notes/count?query=${q({ title: "lean path" })}`, { token: root });
		expect(count.lean.status).toBe(200);
		expect(count.lean.body).toEqual(count.ref.body);
	});

	test("patch and remove", async () => {
		const patched = await same("PATCH", (side) => `/content/notes/${ids[side]}`, { token: root, body: { content: "patched" } }, { replace: byId });
		expect(patched.lean.status).toBe(200);
		expect(patched.lean.body.data.content).toBe("patched");
		const removed = await same("DELETE", (side) => `/content/notes/${ids[side]}`, { token: root }, { replace: byId });
		expect(removed.lean.status).toBe(200);
		const gone = await same("GET", (side) => `/content/notes/${ids[side]}`, { token: root }, { replace: byId });
		expect(gone.lean.status).toBe(404);
	});

	test("404, 400 (bad query, bad JSON, bad gzip), 413", async () => {
		const missing = await same("GET", `/content/notes/${"0".repeat(24)}`, { token: root });
		expect(missing.lean.status).toBe(404);
		expect(missing.lean.body).toEqual({ statusCode: 404, message: expect.any(String), error: "Not Found" });
		const badQuery = await same("GET", `/content/notes?query=${encodeURIComponent("{title:")}`, { token: root });
		expect(badQuery.lean.body).toEqual({ statusCode: 400, message: "query must be valid JSON", error: "Bad Request" });
		const badJson = await same("POST", "/content/notes", { token: root, raw: "{not json" });
		expect(badJson.lean.status).toBe(400);
		expect(badJson.lean.body.error).toBe("Bad Request");
		const badGzip = await same("POST", "/content/notes", {
			token: root,
			raw: Buffer.from("not gzip at all"),
			headers: { "content-type": "application/json", "content-encoding": "gzip" },
		});
		expect(badGzip.lean.body).toEqual({ statusCode: 400, message: "request body is not valid gzip", error: "Bad Request" });
		const gzipped = await same(
			"POST",
			"/content/notes",
			{ token: root, raw: zlib.gzipSync(JSON.stringify({ title: "gzipped" })), headers: { "content-type": "application/json", "content-encoding": "gzip" } },
			{ replace: byId },
		);
		expect(gzipped.lean.status).toBe(200);
		expect(gzipped.lean.body.data.title).toBe("gzipped");
		const big = await same("POST", "/content/notes", { token: root, raw: JSON.stringify({ title: "x".repeat(1024 * 1024) }) });
		expect(big.lean.body).toEqual({ statusCode: 413, message: "body must not be larger than 1 MiB", error: "Payload Too Large" });
	});

	test("401 without a token or with a bad one, 403 at the scope layer and at the grant layer", async () => {
		const anonymous = await same("GET", "/content/notes");
		expect(anonymous.lean.status).toBe(401);
		expect(anonymous.lean.body.error).toBe("Unauthorized");
		const bad = await same("GET", "/content/notes/count", { token: "not-a-token" });
		expect(bad.lean.status).toBe(401);
		const scope = await same("POST", "/content/notes", { token: readOnly, body: { title: "no" } });
		expect(scope.lean.body).toEqual({ statusCode: 403, message: expect.any(String), error: "Forbidden" });
		const grant = await same("GET", "/content/notes", { token: noGrant });
		expect(grant.lean.body).toEqual({ statusCode: 403, message: expect.any(String), error: "Forbidden" });
	});

	test("X-Request-ID: x-request-id and x-correlation-id are echoed, on answers and on errors", async () => {
		const given = await same("GET", "/content/notes/count", { token: root, headers: { "x-request-id": "lean-req-1" } });
		expect(given.lean.headers.get("x-request-id")).toBe("lean-req-1");
		const correlation = await same("GET", "/content/notes/count", { token: root, headers: { "x-request-id": "a", "x-correlation-id": "lean-corr-1" } });
		expect(correlation.lean.headers.get("x-request-id")).toBe("lean-corr-1");
		const onError = await same("GET", `/content/notes/${"0".repeat(24)}`, { token: root, headers: { "x-request-id": "lean-404" } });
		expect(onError.lean.status).toBe(404);
		expect(onError.lean.headers.get("x-request-id")).toBe("lean-404");
	});

	test("a trailing slash, an unknown method and a path that does not decode stay as they were", async () => {
		const slash = await same("GET", "/content/notes/count/", { token: root });
		expect(slash.lean.status).toBe(200);
		// Not an alias of the api route: moleculer-web's handler on both sides (api.rest counted on each).
		const lean = await send(p.url, "PUT", "/content/notes/count", { token: root });
		const ref = await send(`http://127.0.0.1:${(reference.address() as AddressInfo).port}`, "PUT", "/content/notes/count", { token: root });
		expect(answer(lean)).toEqual(answer(ref));
		// A path parameter that does not decode: moleculer-web's handler answers on both sides.
		const badPath = { token: root, plain: true };
		const leanBad = await send(p.url, "GET", "/content/notes/%E0%A4%A", badPath);
		const refBad = await send(`http://127.0.0.1:${(reference.address() as AddressInfo).port}`, "GET", "/content/notes/%E0%A4%A", badPath);
		expect(leanBad.status).toBe(400);
		expect(answer(leanBad)).toEqual(answer(refBad));
	});
});
