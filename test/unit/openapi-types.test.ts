/**
 * Issue 33 item 6, in the document itself: a typed client that types. Every collection has a `<Name>Full` schema
 * whose required list is what an un-narrowed answer always holds (the server side is checked by
 * test/integration/openapi-required.test.ts); `rand` and `timestamp` carry real examples; 429, 503 and 504 are
 * declared wherever they can be answered; `/metrics` declares its 401; the token endpoint's form and HTTP Basic
 * client authentication validate; `/api-json/{service}` is an operation.
 */
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import { COLLECTIONS, DOMAINS } from "../../catalog";
import { ALWAYS_RETURNED, fullyReturned, openApiDocument, schemaName } from "../../lib/openapi";
import { openApiServiceDocument } from "../../lib/openapi";
import { randomHelper, randomToken } from "../../lib/crypto";
import { allRoutes } from "../../lib/routes";

type Obj = Record<string, any>;
const doc = openApiDocument() as Obj;
const deref = (o: Obj): Obj =>
	o?.$ref
		? o.$ref
				.replace(/^#\//, "")
				.split("/")
				.reduce((a: Obj, k: string) => a?.[k], doc)
		: o;
const operations = (d: Obj = doc): Array<{ path: string; method: string; op: Obj }> =>
	Object.entries(d.paths as Obj).flatMap(([path, item]) => Object.entries(item as Obj).map(([method, op]) => ({ path, method, op: op as Obj })));
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
ajv.addSchema(doc, "api");
const validator = (name: string) => ajv.getSchema(`api#/components/schemas/${name}`)!;

describe("every collection's document in full", () => {
	test.each(COLLECTIONS.map((c) => [c.path, c] as const))("%s: <Name>Full requires what an un-narrowed answer holds", (_path, { domain: d, collection: c }) => {
		const name = schemaName(d, c);
		const full = doc.components.schemas[`${name}Full`];
		expect(full.allOf).toEqual([{ $ref: `#/components/schemas/${name}` }]);
		expect(full.required).toEqual(fullyReturned(c));
		expect(full.required).toEqual(expect.arrayContaining([...ALWAYS_RETURNED]));
		// Every required field is a property the document describes, and none is write-only (never returned).
		const base = doc.components.schemas[name];
		for (const f of full.required) expect({ f, described: f in base.properties, writeOnly: !!base.properties[f]?.writeOnly }).toEqual({ f, described: true, writeOnly: false });
		// The narrowed view, the one a projection or a grant's field list answers, only requires `id`.
		expect(base.required).toEqual(["id"]);
	});

	test("answers name both forms: a list's items, a get's and a create's data", () => {
		const view = (o: Obj, key: "items" | "data") => {
			const s = o.responses["200"].content["application/json"].schema.properties[key];
			return key === "items" ? s.items : s;
		};
		expect(view(doc.paths["/content/notes"].get, "items")).toEqual({ anyOf: [{ $ref: "#/components/schemas/ContentNotesFull" }, { $ref: "#/components/schemas/ContentNotes" }] });
		expect(view(doc.paths["/content/notes/{id}"].get, "data")).toEqual({
			anyOf: [{ $ref: "#/components/schemas/ContentNotesFull" }, { $ref: "#/components/schemas/ContentNotes" }],
		});
		expect(view(doc.paths["/domain/clients"].post, "data")).toEqual({
			anyOf: [{ $ref: "#/components/schemas/DomainClientsFull" }, { $ref: "#/components/schemas/DomainClientsCreated" }],
		});
	});

	test("a narrowed answer is valid as a document but not in full; a full one is both", () => {
		const note = {
			id: "65f1c0a2b3c4d5e6f7a8b9c0",
			owner: "65f1c0a2b3c4d5e6f7a8b9c0",
			clients: ["65f1c0a2b3c4d5e6f7a8b9c1"],
			created_at: "2026-01-15T09:30:00.000Z",
			created_by: "65f1c0a2b3c4d5e6f7a8b9c0",
			created_in: "65f1c0a2b3c4d5e6f7a8b9c1",
			updated_at: "2026-01-15T09:30:00.000Z",
			updated_by: "65f1c0a2b3c4d5e6f7a8b9c0",
			updated_in: "65f1c0a2b3c4d5e6f7a8b9c1",
			deleted_at: null,
			shares: [],
			groups: [],
			version: "1.0.0",
			rand: randomHelper(12),
			timestamp: String(Date.now()),
			title: "a note",
		};
		expect(validator("ContentNotesFull")(note)).toBe(true);
		expect(validator("ContentNotes")(note)).toBe(true);
		const { title: _t, ...untitled } = note;
		expect(validator("ContentNotesFull")(untitled)).toBe(false);
		expect(validator("ContentNotes")({ id: note.id, title: "projected" })).toBe(true);
		expect(validator("ContentNotesFull")({ id: note.id, title: "projected" })).toBe(false);
		expect(validator("ContentNotes")({ title: "no id" })).toBe(false);
	});
});

describe("rand and timestamp", () => {
	const props = doc.components.schemas.ContentNotes.properties;

	test("their examples are values the platform writes, and the patterns hold for what it writes", () => {
		const rand = new RegExp(props.rand.pattern);
		const timestamp = new RegExp(props.timestamp.pattern);
		for (const example of props.rand.examples) expect(example).toMatch(rand);
		for (const example of props.timestamp.examples) expect(example).toMatch(timestamp);
		for (let i = 0; i < 200; i++) {
			// The engine's create and platformDoc (randomHelper), the delivery retry's record (randomToken).
			expect(randomHelper(12)).toMatch(rand);
			expect(randomToken(12)).toMatch(rand);
		}
		expect(String(Date.now())).toMatch(timestamp);
		expect(props.rand.description).toContain("base64url");
		expect(props.timestamp.description).toContain("Unix milliseconds");
		expect(props.rand.examples).not.toContain("0.4210748");
	});
});

describe("statuses every operation that reaches a service can answer", () => {
	const ops = new Set(["/status", "/metrics", "/api-json", "/api-json/{service}"]);

	test("429, 503 and 504, with Retry-After, on every operation of the route table", () => {
		const missing: string[] = [];
		let count = 0;
		for (const { path, method, op } of operations()) {
			if (ops.has(path)) continue;
			count++;
			for (const code of ["429", "503", "504"]) if (!op.responses[code]) missing.push(`${method.toUpperCase()} ${path}: ${code}`);
		}
		expect(missing).toEqual([]);
		expect(count).toBe(allRoutes().length);
		for (const name of ["TooManyRequests", "ServiceUnavailable", "GatewayTimeout"]) {
			const r = doc.components.responses[name];
			expect(r.headers["Retry-After"].schema).toEqual({ type: "integer", minimum: 0 });
			expect(r.content["application/json"].schema).toEqual({ $ref: "#/components/schemas/Error" });
		}
		expect(doc.components.responses.ServiceUnavailable.content["application/json"].example).toEqual({
			statusCode: 503,
			message: "service unavailable",
			error: "Service Unavailable",
		});
		expect(doc.components.responses.GatewayTimeout.content["application/json"].example).toEqual({ statusCode: 504, message: "request timed out", error: "Gateway Timeout" });
		expect(doc.components.responses.TooManyRequests.description).toContain("RATE_LIMIT");
	});

	test("the per-service documents keep them, and every reference they make resolves in them", () => {
		for (const d of DOMAINS) {
			const one = openApiServiceDocument(d.name) as Obj;
			for (const { op } of operations(one)) for (const code of ["429", "503", "504"]) expect(op.responses[code]).toBeDefined();
			const text = JSON.stringify(one);
			for (const m of text.matchAll(/"\$ref":"#\/components\/(\w+)\/([^"]+)"/g)) expect({ ref: m[0], found: !!one.components[m[1]]?.[m[2]] }).toEqual({ ref: m[0], found: true });
		}
	});
});

describe("the gateway's own routes", () => {
	test("/metrics declares its 401 in the error shape under METRICS_TOKEN, and its bearer scheme", () => {
		const m = doc.paths["/metrics"].get;
		expect(m.security).toEqual([{}, { metricsToken: [] }]);
		expect(doc.components.securitySchemes.metricsToken).toMatchObject({ type: "http", scheme: "bearer" });
		expect(m.responses["401"].content["application/json"]).toEqual({
			schema: { $ref: "#/components/schemas/Error" },
			example: { statusCode: 401, message: "metrics token is required", error: "Unauthorized" },
		});
		expect(m.responses["401"].headers["WWW-Authenticate"]).toBeDefined();
	});

	test("/api-json and /api-json/{service} are operations; the service is one of the catalog's", () => {
		expect(doc.paths["/api-json"].get.operationId).toBe("ops_api_json");
		const one = doc.paths["/api-json/{service}"].get;
		expect(one.operationId).toBe("ops_api_json_service");
		expect(one.security).toEqual([]);
		expect(one.parameters).toEqual([
			{ name: "service", in: "path", required: true, description: expect.any(String), schema: { type: "string", enum: DOMAINS.map((d) => d.name) } },
		]);
		expect(deref(one.responses["404"]).content["application/json"].schema).toEqual({ $ref: "#/components/schemas/Error" });
	});
});

describe("POST /auth/token as OAuth 2.0 clients send it", () => {
	const token = doc.paths["/auth/token"].post;

	test("a form with the client in HTTP Basic (docs/getting-started.md) is a valid request; so is JSON with it", () => {
		const form = validator("TokenForm");
		expect(token.requestBody.content["application/x-www-form-urlencoded"].schema).toEqual({ $ref: "#/components/schemas/TokenForm" });
		expect(token.security).toEqual([{}, { clientBasic: [] }]);
		expect(form({ grant_type: "client_credentials" })).toBe(true);
		expect(form({ grant_type: "password", client_id: "65f1c0a2b3c4d5e6f7a8b9c1", username: "ada", password: "Ada-Lovelace-1815!" })).toBe(true);
		expect(form({ grant_type: "password", scope: "read:content whole", strict: "true" })).toBe(true);
		expect(form({ grant_type: "password", strict: true })).toBe(false);
		expect(form({ grant_type: "nope" })).toBe(false);
		expect(form({ client_id: "65f1c0a2b3c4d5e6f7a8b9c1" })).toBe(false);
		const json = validator("TokenRequest");
		expect(json({ grant_type: "client_credential" })).toBe(true);
		expect(json({ grant_type: "password", client_id: "x", username: "ada" })).toBe(false);
	});
});
