/**
 * Every error case of the platform skeleton, through HTTP: exact `{ statusCode, message, error }` bodies
 * (docs/contracts.md "Errors"), and never a 5xx.
 */
import http from "http";
import { COLLECTIONS, PLATFORM_FIELDS } from "../../catalog";
import { bootPlatform, type HttpResult, type TestPlatform } from "../helpers/platform";
import { sampleBody, unique } from "../helpers/samples";

let p: TestPlatform;
let token: string;
const statuses: Array<{ what: string; status: number }> = [];

beforeAll(async () => {
	p = await bootPlatform();
	token = await p.rootToken();
});
afterAll(() => p?.cleanup());

const q = (v: unknown) => encodeURIComponent(typeof v === "string" ? v : JSON.stringify(v));

async function call(method: string, path: string, opts: { body?: unknown; raw?: string; headers?: Record<string, string>; anonymous?: boolean } = {}): Promise<HttpResult> {
	const r = await p.http(method, path, { token: opts.anonymous ? undefined : token, body: opts.body, raw: opts.raw, headers: opts.headers });
	statuses.push({ what: `${method} ${path.slice(0, 120)}`, status: r.status });
	return r;
}

const NAMES: Record<number, string> = { 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed", 409: "Conflict", 413: "Payload Too Large" };
const err = (statusCode: number, message: string) => ({ statusCode, message, error: NAMES[statusCode] });

async function expectError(r: Promise<HttpResult> | HttpResult, status: number, message: string) {
	const res = await r;
	expect({ status: res.status, body: res.body }).toEqual({ status, body: err(status, message) });
	expect(res.headers.get("content-type")).toMatch(/^application\/json/);
}

describe("list, count and cursor parameters", () => {
	const reads = ["/content/notes", "/content/notes/count", "/content/notes/cursor"];

	test("query, pagination and projection that are not JSON → 400", async () => {
		for (const path of reads) {
			await expectError(call("GET", `${path}?query=${q("{title:")}`), 400, "query must be valid JSON");
			await expectError(call("GET", `${path}?query=${q("not json")}`), 400, "query must be valid JSON");
		}
		await expectError(call("GET", `/content/notes?pagination=${q("{limit:5}")}`), 400, "pagination must be valid JSON");
		await expectError(call("GET", `/content/notes/cursor?pagination=${q("[")}`), 400, "pagination must be valid JSON");
		await expectError(call("GET", `/content/notes?projection=${q("{title}")}`), 400, "projection must be valid JSON");
		await expectError(call("GET", `/content/notes/${"a".repeat(24)}?projection=${q("x")}`), 400, "projection must be valid JSON");
		await expectError(call("GET", `/content/notes?query=${q("[1,2]")}`), 400, "query must be a JSON object");
		await expectError(call("GET", `/content/notes?pagination=${q("5")}`), 400, "pagination must be a JSON object");
		await expectError(call("GET", `/content/notes/count?query=${q("5")}`), 400, "query must be a JSON object");
		await expectError(call("GET", `/content/notes?query=${q("null")}`), 400, "query must be a JSON object");
		await expectError(call("GET", `/content/notes?projection=${q("true")}`), 400, "projection must be a JSON object");
	});

	test("$where, $function, $expr and $accumulator → 400, at query level and under a field", async () => {
		for (const op of ["$where", "$function", "$expr", "$accumulator"]) {
			for (const path of reads) await expectError(call("GET", `${path}?query=${q({ [op]: "function () { return true }" })}`), 400, `operator ${op} is not allowed`);
			await expectError(call("GET", `/content/notes?query=${q({ title: { [op]: "1" } })}`), 400, `operator ${op} is not allowed`);
			await expectError(call("GET", `/content/notes?query=${q({ $or: [{ title: "a" }, { [op]: "1" }] })}`), 400, `operator ${op} is not allowed`);
			await expectError(call("PATCH", `/content/notes/bulk?query=${q({ [op]: "1" })}`, { body: { title: "x" } }), 400, `operator ${op} is not allowed`);
		}
		await expectError(call("GET", `/content/notes?query=${q({ title: { $foo: 1 } })}`), 400, "unknown operator $foo");
	});

	test("__proto__ and constructor keys → 400", async () => {
		await expectError(call("GET", `/content/notes?query=${q('{"__proto__":{"polluted":1}}')}`), 400, "forbidden key __proto__");
		await expectError(call("GET", `/content/notes?query=${q('{"constructor":{"prototype":{"polluted":1}}}')}`), 400, "forbidden key constructor");
		await expectError(call("GET", `/content/notes/count?query=${q('{"props.__proto__.x":1}')}`), 400, "forbidden key __proto__");
		await expectError(call("GET", `/content/notes?query=${q('{"props":{"__proto__":{"x":1}}}')}`), 400, "forbidden key __proto__");
		await expectError(call("GET", `/content/notes?query=${q('{"$or":[{"constructor":1}]}')}`), 400, "forbidden key constructor");
		await expectError(call("GET", `/content/notes?pagination=${q('{"sort":{"__proto__":1}}')}`), 400, "forbidden key __proto__");
		await expectError(call("GET", `/content/notes?projection=${q('{"constructor":1}')}`), 400, "forbidden key constructor");
		expect(({} as Record<string, unknown>).polluted).toBeUndefined();
	});

	test("a query nested too deeply → 400", async () => {
		let deep: Record<string, unknown> = { title: "x" };
		for (let i = 0; i < 12; i++) deep = { $and: [deep] };
		await expectError(call("GET", `/content/notes?query=${q(deep)}`), 400, "query is too deeply nested (at most 8 levels)");
		let sub: unknown = 1;
		for (let i = 0; i < 12; i++) sub = { a: sub };
		await expectError(call("GET", `/content/notes/count?query=${q({ props: sub })}`), 400, "query is too deeply nested (at most 8 levels)");
	});

	test("$in with more than 500 values → 400; 500 values pass", async () => {
		// Short values: 501 object ids would not fit in a request line.
		const values = (n: number) => Array.from({ length: n }, (_, i) => i);
		await expectError(call("GET", `/content/notes?query=${q({ title: { $in: values(501) } })}`), 400, "$in accepts at most 500 values");
		await expectError(call("GET", `/content/notes/count?query=${q({ tags: { $nin: values(501) } })}`), 400, "$nin accepts at most 500 values");
		await expectError(call("GET", `/content/notes/cursor?query=${q({ $or: [{ title: { $in: values(501) } }] })}`), 400, "$in accepts at most 500 values");
		const ok = await call("GET", `/content/notes/count?query=${q({ title: { $in: values(500) } })}`);
		expect(ok.body).toEqual({ total: 0 });
	});

	test("a $regex that is too long, does not compile, or uses syntax RE2 cannot match in linear time → 400", async () => {
		await expectError(call("GET", `/content/notes?query=${q({ title: { $regex: "a".repeat(257) } })}`), 400, "$regex is too long (at most 256 characters)");
		await expectError(call("GET", `/content/notes?query=${q({ title: { $regex: "(" } })}`), 400, "$regex is not a valid regular expression");
		await expectError(call("GET", `/content/notes?query=${q({ title: { $regex: "[a-" } })}`), 400, "$regex is not a valid regular expression");
		await expectError(call("GET", `/content/notes?query=${q({ title: { $regex: "(a)\\1" } })}`), 400, "query.title: $regex uses syntax that cannot be matched in linear time");
		// Nested quantifiers are matched in linear time now (RE2), not refused.
		expect((await call("GET", `/content/notes?query=${q({ title: { $regex: "(a+)+$" } })}`)).status).toBe(200);
		await expectError(call("GET", `/content/notes?query=${q({ title: { $regex: "a", $options: "x" } })}`), 400, "$options may only contain i, m and s");
		const ok = await call("GET", `/content/notes?query=${q({ title: { $regex: "a".repeat(256), $options: "i" } })}`);
		expect(ok.status).toBe(200);
	});

	test("pagination out of range → 400", async () => {
		await expectError(call("GET", `/content/notes?pagination=${q({ limit: 101 })}`), 400, "pagination.limit must be at most 100");
		await expectError(call("GET", `/content/notes/cursor?pagination=${q({ limit: 101 })}`), 400, "pagination.limit must be at most 100");
		await expectError(call("GET", `/content/notes?pagination=${q({ limit: 0 })}`), 400, "pagination.limit must be at least 1");
		await expectError(call("GET", `/content/notes?pagination=${q({ skip: -1 })}`), 400, "pagination.skip must be at least 0");
		await expectError(call("GET", `/content/notes?pagination=${q({ limit: 1.5 })}`), 400, "pagination.limit must be an integer");
		await expectError(call("GET", `/content/notes?pagination=${q({ sort: { title: 2 } })}`), 400, 'pagination.sort.title must be 1, -1, "asc" or "desc"');
		await expectError(call("GET", `/content/notes?pagination=${q({ page: 2 })}`), 400, "pagination.page is not allowed");
		expect((await call("GET", `/content/notes?pagination=${q({ limit: 100 })}`)).status).toBe(200);
	});

	test("an unknown zone → 400, as parameter or header", async () => {
		await expectError(call("GET", `/content/notes?zone=own,everyone`), 400, "unknown zone everyone");
		await expectError(call("GET", `/content/notes/count?zone=public`), 400, "unknown zone public");
		await expectError(call("GET", `/content/notes`, { headers: { "x-zone": "world" } }), 400, "unknown zone world");
		expect((await call("GET", `/content/notes?zone=own,share,group,client`)).status).toBe(200);
	});

	test("populate of a field that is not a relation → 400", async () => {
		await expectError(call("GET", `/content/notes?populate=title`), 400, "title cannot be populated");
		await expectError(call("GET", `/content/notes?populate=${q([{ path: "content" }])}`), 400, "content cannot be populated");
		await expectError(call("GET", `/touch/notices?populate=thumbnail`), 400, "thumbnail cannot be populated");
		await expectError(call("GET", `/touch/emails/cursor?populate=attachments`), 400, "attachments cannot be populated");
		await expectError(call("GET", `/essential/saga-stages?populate=${q("{bad")}`), 400, "populate must be valid JSON");
		// A declared relation populates, in both syntaxes.
		expect((await call("GET", `/essential/saga-stages?populate=saga`)).status).toBe(200);
		expect((await call("GET", `/essential/saga-stages?populate=${q([{ path: "saga", select: ["ttl"] }])}`)).status).toBe(200);
	});
});

describe("bodies", () => {
	test("a body with a platform field → 400 naming the field (create, bulk create, patch, bulk patch)", async () => {
		const note = (await call("POST", "/content/notes", { body: { title: "target" } })).body.data;
		const fields = Object.keys(PLATFORM_FIELDS);
		expect(fields).toEqual(expect.arrayContaining(["id", "owner", "clients", "created_at", "updated_by", "deleted_at", "restored_in", "rand", "timestamp"]));
		for (const f of fields) {
			const v = f === "clients" ? ["x"] : "x";
			await expectError(call("POST", "/content/notes", { body: { title: "t", [f]: v } }), 400, `${f} is set by the platform`);
			await expectError(call("POST", "/content/notes/bulk", { body: { items: [{ title: "a" }, { title: "b", [f]: v }] } }), 400, `items[1].${f} is set by the platform`);
			await expectError(call("PATCH", `/content/notes/${note.id}`, { body: { [f]: v } }), 400, `${f} is set by the platform`);
			await expectError(call("PATCH", `/content/notes/bulk?query=${q({ id: note.id })}`, { body: { [f]: v } }), 400, `${f} is set by the platform`);
		}
		// Internal fields are the platform's too.
		await expectError(call("POST", "/special/files", { body: { name: "f", storage: "/etc/passwd" } }), 400, "storage is set by the platform");
		await expectError(call("POST", "/auth/apts", { body: { name: "a", token: "APT-mine" } }), 400, "token is set by the platform");
		// Nothing changed.
		expect((await call("GET", `/content/notes/${note.id}`)).body).toEqual({ data: note });
	});

	test("a missing required field → 400 naming it", async () => {
		await expectError(call("POST", "/content/notes", { body: { content: "no title" } }), 400, "title is required");
		await expectError(call("POST", "/content/notes/bulk", { body: { items: [{ title: "ok" }, { content: "x" }] } }), 400, "items[1].title is required");
		const noKeys = sampleBody("touch/pushes");
		delete noKeys.keys;
		await expectError(call("POST", "/touch/pushes", { body: noKeys }), 400, "keys is required");
		const noSaga = sampleBody("financial/transactions");
		delete noSaga.saga;
		await expectError(call("POST", "/financial/transactions", { body: noSaga }), 400, "saga is required");
		await expectError(call("POST", "/identity/users", { body: { password: "secret-pass-1" } }), 400, "one of username, email or phone is required");
		await expectError(call("POST", "/content/notes", { body: {} }), 400, "title is required");
	});

	test("a wrong type, enum value or format → 400 naming the field", async () => {
		const cases: Array<[string, Record<string, unknown>, string]> = [
			["/content/notes", { title: 42 }, "title must be a string"],
			["/content/notes", { title: "t", tags: "one" }, "tags must be an array"],
			["/content/notes", { title: "t", tags: [1] }, "tags[0] must be a string"],
			["/content/notes", { title: "t", props: [1] }, "props must be an object"],
			["/content/notes", { title: "t", version: "v1" }, "version must be a SemVer version"],
			["/content/posts", { title: "t", status: "LIVE" }, "status must be one of DRAFT, PUBLISHED"],
			["/essential/sagas", { ...sampleBody("essential/sagas"), ttl: 1.5 }, "ttl must be an integer"],
			["/essential/sagas", { ...sampleBody("essential/sagas"), job: "not-a-uuid" }, "job must be a UUID"],
			["/essential/sagas", { ...sampleBody("essential/sagas"), session: "xyz" }, "session must be a hex string"],
			["/essential/sagas", { ...sampleBody("essential/sagas"), state: "DONE" }, "state must be one of AWAITING, ABORTED, COMMITTED"],
			["/essential/saga-stages", { ...sampleBody("essential/saga-stages"), bucket: "nope/nothing" }, `bucket must be one of ${COLLECTIONS.map((c) => c.path).join(", ")}`],
			["/career/customers", { name: "c", email: "not-an-email" }, "email must be an email address"],
			["/identity/users", { username: `u${unique()}`, phone: "4155550123" }, "phone must be a phone number in E.164 format"],
			["/touch/pushes", { ...sampleBody("touch/pushes"), endpoint: "ftp://example.com/x" }, "endpoint must be an http(s) URL"],
			["/touch/smss", { ...sampleBody("touch/smss"), receptors: ["+14155550123", "0123"] }, "receptors[1] must be a phone number in E.164 format"],
			["/touch/emails", { ...sampleBody("touch/emails"), to: ["a@example.com", "nobody"] }, "to[1] must be an email address"],
			["/career/branches", { name: "b", business: "123" }, "business must be a 24-hex object id"],
			["/general/events", { title: "e", start_at: "tomorrow" }, "start_at must be a date (ISO 8601 or Unix milliseconds)"],
			["/thing/metrics", { value: "7" }, "value must be a number"],
			["/touch/notices", { ...sampleBody("touch/notices"), visited: "yes" }, "visited must be a boolean"],
			["/career/products", { name: "p", price: -1 }, "price must be at least 0"],
			["/content/notes", { title: "t".repeat(1001) }, "title must be at most 1000 characters"],
			["/content/notes", { title: null }, "title must not be null"],
		];
		for (const [path, body, message] of cases) await expectError(call("POST", path, { body }), 400, message);
		const note = (await call("POST", "/content/notes", { body: { title: "typed" } })).body.data;
		await expectError(call("PATCH", `/content/notes/${note.id}`, { body: { title: 1 } }), 400, "title must be a string");
		await expectError(call("PATCH", `/content/notes/${note.id}`, { body: { title: null } }), 400, "title must not be null");
		await expectError(call("PATCH", `/content/notes/${note.id}`, { body: {} }), 400, "body must change at least one field");
	});

	test("an unknown field → 400 naming it", async () => {
		await expectError(call("POST", "/content/notes", { body: { title: "t", colour: "red" } }), 400, "colour is not a field of notes");
		await expectError(call("POST", "/content/notes/bulk", { body: { items: [{ title: "t", x: 1 }] } }), 400, "items[0].x is not a field of notes");
		await expectError(call("POST", "/content/notes", { raw: '{"title":"t","__proto__":{"polluted":true}}' }), 400, "__proto__ is not a field of notes");
		await expectError(call("POST", "/content/notes", { body: { title: "t", props: { constructor: { prototype: 1 } } } }), 400, "props: key 'constructor' is not allowed");
		await expectError(call("POST", "/content/notes", { body: { title: "t", props: { $set: 1 } } }), 400, "props: key '$set' must not contain '.' or start with '$'");
		await expectError(call("POST", "/content/notes/bulk", { body: { items: [{ title: "t" }], extra: 1 } }), 400, "extra is not allowed in a bulk body");
		await expectError(call("POST", "/content/notes/bulk", { body: { items: [] } }), 400, "items must not be empty");
		await expectError(call("POST", "/content/notes/bulk", { body: { items: { title: "t" } } }), 400, "items must be an array");
		await expectError(call("POST", "/content/notes", { raw: "[1,2]" }), 400, "body must be a JSON object");
		expect(({} as Record<string, unknown>).polluted).toBeUndefined();
	});

	test("an email without html and text → 400", async () => {
		const body = sampleBody("touch/emails");
		delete body.html;
		delete body.text;
		await expectError(call("POST", "/touch/emails", { body }), 400, "an email needs html or text");
		await expectError(call("POST", "/touch/emails", { body: { ...body, html: "" } }), 400, "an email needs html or text");
		await expectError(call("POST", "/touch/emails/bulk", { body: { items: [{ ...body, text: "ok" }, body] } }), 400, "an email needs html or text");
		// A patch may not take the last body away either.
		const email = (await call("POST", "/touch/emails", { body: { ...body, text: "only text" } })).body.data;
		await expectError(call("PATCH", `/touch/emails/${email.id}`, { body: { text: null } }), 400, "an email needs html or text");
		await expectError(call("PATCH", `/touch/emails/bulk?query=${q({ id: email.id })}`, { body: { text: null } }), 400, "an email needs html or text");
		expect((await call("GET", `/touch/emails/${email.id}`)).body.data.text).toBe("only text");
	});

	test("a body over 1 MB → 413 in the error shape", async () => {
		const big = JSON.stringify({ title: "t", content: "x".repeat(1024 * 1024 + 10) });
		await expectError(call("POST", "/content/notes", { raw: big }), 413, "body must not be larger than 1 MiB");
		await expectError(call("POST", "/content/notes/bulk", { raw: JSON.stringify({ items: [{ title: "x".repeat(1024 * 1024) }] }) }), 413, "body must not be larger than 1 MiB");
		// Just under the limit is accepted.
		const ok = await call("POST", "/content/notes", { body: { title: "t", content: "x".repeat(1000 * 1000) } });
		expect(ok.status).toBe(200);
	});

	test("a malformed JSON body → 400 in the error shape", async () => {
		for (const raw of ["{bad", '{"title": "t",}', '{"title": "t"', "\u0000"]) {
			const r = await call("POST", "/content/notes", { raw });
			expect(r.status).toBe(400);
			expect(Object.keys(r.body).sort()).toEqual(["error", "message", "statusCode"]);
			expect(r.body).toEqual({ statusCode: 400, message: "body must be valid JSON", error: "Bad Request" });
		}
		const r = await call("PATCH", `/content/notes/${"a".repeat(24)}`, { raw: "{" });
		expect(r.body).toMatchObject({ statusCode: 400, error: "Bad Request" });
	});
});

describe("documents and routes", () => {
	test("an unknown 24-hex id → 404 on every by-id endpoint", async () => {
		const id = "0123456789abcdef01234567";
		const nf = err(404, "document not found");
		for (const [m, path, body] of [
			["GET", `/content/notes/${id}`],
			["PATCH", `/content/notes/${id}`, { title: "x" }],
			["DELETE", `/content/notes/${id}`],
			["PUT", `/content/notes/${id}/restore`],
			["DELETE", `/content/notes/${id}/destroy`],
			["GET", `/identity/users/${id}`],
		] as Array<[string, string, unknown?]>) {
			await expectError(call(m, path, { body }), 404, nf.message);
		}
		await expectError(call("GET", `/content/notes/no-such-ref?ref=true`), 404, "document not found");
	});

	test("a non-hex id → 404 on every by-id endpoint", async () => {
		for (const id of ["xyz", "0123456789abcdef0123456g", "0123456789abcdef012345678", "1234", "%24where"]) {
			await expectError(call("GET", `/content/notes/${id}`), 404, "document not found");
			await expectError(call("PATCH", `/content/notes/${id}`, { body: { title: "x" } }), 404, "document not found");
			await expectError(call("DELETE", `/content/notes/${id}`), 404, "document not found");
			await expectError(call("PUT", `/content/notes/${id}/restore`), 404, "document not found");
			await expectError(call("DELETE", `/content/notes/${id}/destroy`), 404, "document not found");
		}
	});

	test("a duplicate ref → 409 (create, bulk create, within one bulk, patch)", async () => {
		const ref = `dup-${unique()}`;
		const first = await call("POST", "/content/notes", { body: { title: "first", ref } });
		expect(first.status).toBe(200);
		await expectError(call("POST", "/content/notes", { body: { title: "second", ref } }), 409, "ref already exists");
		await expectError(
			call("POST", "/content/notes/bulk", {
				body: {
					items: [
						{ title: "a", ref: `other-${unique()}` },
						{ title: "b", ref },
					],
				},
			}),
			409,
			"ref already exists",
		);
		const twin = `twin-${unique()}`;
		await expectError(
			call("POST", "/content/notes/bulk", {
				body: {
					items: [
						{ title: "a", ref: twin },
						{ title: "b", ref: twin },
					],
				},
			}),
			409,
			"ref already exists",
		);
		const other = (await call("POST", "/content/notes", { body: { title: "other" } })).body.data;
		await expectError(call("PATCH", `/content/notes/${other.id}`, { body: { ref } }), 409, "ref already exists");
		await expectError(
			call("PATCH", `/content/notes/bulk?query=${q({ id: other.id })}`, { body: { ref: `x-${unique()}` } }),
			400,
			"ref cannot be set by a bulk patch (it is unique)",
		);
		// Nothing of the failed writes was stored.
		expect((await call("GET", `/content/notes/count?query=${q({ ref: { $in: [ref, twin] } })}`)).body).toEqual({ total: 1 });
		expect((await call("GET", `/content/notes/count?query=${q({ title: { $in: ["a", "b", "second"] } })}`)).body).toEqual({ total: 0 });
		// Clearing a ref (null) is not a duplicate, however many documents do it; the freed value is free again.
		const cleared = [];
		for (const title of ["c1", "c2", "c3"]) {
			const d = (await call("POST", "/content/notes", { body: { title, ref: `clear-${unique()}` } })).body.data;
			const r = await call("PATCH", `/content/notes/${d.id}`, { body: { ref: null } });
			expect(r.status).toBe(200);
			expect(r.body.data.ref ?? null).toBeNull();
			cleared.push(d);
		}
		const plain = (await call("POST", "/content/notes", { body: { title: "never had a ref" } })).body.data;
		expect((await call("PATCH", `/content/notes/${plain.id}`, { body: { ref: null } })).status).toBe(200);
		expect((await call("PATCH", `/content/notes/${plain.id}`, { body: { ref: cleared[0].ref } })).body.data.ref).toBe(cleared[0].ref);
		// Same ref in another collection is fine: unique per collection.
		expect((await call("POST", "/content/posts", { body: { title: "post", ref } })).status).toBe(200);
	});

	test("an unknown route → 404 in the error shape, with or without a token", async () => {
		for (const [m, path] of [
			["GET", "/nope"],
			["GET", "/content/nothing"],
			["GET", "/content/notes/0123456789abcdef01234567/extra/segments"],
			["PUT", "/content/notes"],
			["POST", "/content/notes/0123456789abcdef01234567"],
			["GET", "/auth/nothing"],
		]) {
			await expectError(call(m, path), 404, "Not found");
			await expectError(call(m, path, { anonymous: true }), 404, "Not found");
		}
	});

	test("a missing token, or one that is no token → 401 `authorization token is required`", async () => {
		for (const [m, path] of [
			["GET", "/content/notes"],
			["GET", "/content/notes/count"],
			["GET", "/content/notes/cursor"],
			["POST", "/content/notes"],
			["GET", `/content/notes/${"a".repeat(24)}`],
			["DELETE", `/content/notes/${"a".repeat(24)}/destroy`],
			["GET", "/auth/verify"],
		]) {
			await expectError(call(m, path, { anonymous: true, body: m === "POST" ? { title: "t" } : undefined }), 401, "authorization token is required");
		}
		// No bearer at all: the header is empty of a token, or of another scheme.
		for (const none of ["Bearer", "Basic cm9vdDpyb290"]) {
			await expectError(call("GET", "/content/notes", { anonymous: true, headers: { authorization: none } }), 401, "authorization token is required");
		}
		// A bearer that is not a token of this platform (malformed, forged, an APT of the wrong form).
		for (const bad of ["Bearer not-a-jwt", "Bearer eyJhbGciOiJIUzI1NiJ9.e30.c2ln", "Bearer APT-unknown"]) {
			await expectError(call("GET", "/content/notes", { anonymous: true, headers: { authorization: bad } }), 401, "authorization token is required");
		}
		await expectError(call("GET", `/content/notes?token=garbage`, { anonymous: true }), 401, "authorization token is required");
		// The token as query parameter works (spec: alternative carrier).
		expect((await call("GET", `/content/notes?token=${token}`, { anonymous: true })).status).toBe(200);
	});

	test("methods the platform writes itself → 405 on push-histories", async () => {
		await expectError(call("POST", "/touch/push-histories", { body: { status: "sent" } }), 405, "touch/push-histories is written by the platform only");
	});

	test("a client that sends a request line with a raw bad path still gets the error shape", async () => {
		const { port } = new URL(p.url);
		const res = await new Promise<{ status: number; body: string }>((resolve, reject) => {
			const req = http.request({ host: "127.0.0.1", port, method: "GET", path: "/content/notes/%E0%A4%A", headers: { authorization: `Bearer ${token}` } }, (r) => {
				let body = "";
				r.on("data", (c) => (body += c));
				r.on("end", () => resolve({ status: r.statusCode!, body }));
			});
			req.on("error", reject);
			req.end();
		});
		statuses.push({ what: "GET /content/notes/%E0%A4%A", status: res.status });
		expect([400, 404]).toContain(res.status);
		expect(Object.keys(JSON.parse(res.body)).sort()).toEqual(["error", "message", "statusCode"]);
	});
});

test("no response in these tests was a 5xx", () => {
	expect(statuses.length).toBeGreaterThan(200);
	expect(statuses.filter((s) => s.status >= 500)).toEqual([]);
});
