/** The OpenAPI document must describe exactly the route table, with the spec's envelopes and no dangling refs. */
import { COLLECTIONS, STANDARD_OPS } from "../../catalog";
import { OPENAPI_MAX_BULK, openApiDocument, schemaName } from "../../lib/openapi";
import { allRoutes, publicCollectionRoutes } from "../../lib/routes";
import { MAX_BULK } from "../../engine/collection.mixin";

type Obj = Record<string, any>;
const doc = openApiDocument() as Obj;
const toOpenApiPath = (p: string) => p.replace(/:([A-Za-z_]\w*)/g, "{$1}");
const op = (path: string, method: string): Obj => doc.paths[path][method];
const content = (o: Obj, code = "200"): Obj => o.responses[code].content["application/json"].schema;
const resolve = (s: Obj): Obj => {
	if (!s.$ref) return s;
	const [, , kind, name] = s.$ref.split("/");
	return doc.components[kind][name];
};
/** A document in an answer: read in full (`<Name>Full`) or narrowed by a projection or a grant's field list. */
const view = (name: string, narrowed = name) => ({ anyOf: [{ $ref: `#/components/schemas/${name}Full` }, { $ref: `#/components/schemas/${narrowed}` }] });
const paramNames = (o: Obj): string[] => (o.parameters ?? []).map((p: Obj) => resolve(p)).map((p: Obj) => `${p.in}:${p.name}`);

describe("openApiDocument", () => {
	it("is OpenAPI 3.1.0 with the package version and a server", () => {
		expect(doc.openapi).toBe("3.1.0");
		expect(doc.info.title).toBe("Platform Gateway");
		expect(doc.info.version).toBe(require("../../package.json").version);
		expect(doc.servers).toEqual([{ url: "/" }]);
		expect((openApiDocument({ serverUrl: "http://localhost:3010" }) as Obj).servers).toEqual([{ url: "http://localhost:3010" }]);
		// The server override must not leak into the cached document.
		expect((openApiDocument() as Obj).servers).toEqual([{ url: "/" }]);
	});

	it("has every route of the table, and nothing else", () => {
		const routes = allRoutes();
		for (const r of routes) {
			const path = toOpenApiPath(r.path);
			expect(doc.paths[path]?.[r.method.toLowerCase()]).toBeDefined();
			expect(op(path, r.method.toLowerCase()).operationId).toBe(r.operationId ?? r.action.replace(/\./g, "_"));
		}
		const count = Object.values(doc.paths as Obj).reduce((n, item: Obj) => n + Object.keys(item).length, 0);
		// Plus the gateway's own GET /status, GET /metrics and this document's GET /api-json and /api-json/{service}.
		expect(count).toBe(routes.length + 4);
		expect(
			Object.keys(doc.paths)
				.filter((p) => !routes.some((r) => toOpenApiPath(r.path) === p))
				.sort(),
		).toEqual(["/api-json", "/api-json/{service}", "/metrics", "/status"]);
	});

	it("gives every collection its 11 operations with unique operationIds and the collection tag", () => {
		const ids = new Set<string>();
		for (const { domain: d, collection: c } of COLLECTIONS) {
			const tag = `${d.name}/${c.name}`;
			const ops = Object.values(doc.paths as Obj)
				.flatMap((item: Obj) => Object.values(item))
				.filter((o: Obj) => o.tags.includes(tag));
			// The 11 operations, plus the collection's built special actions (catalog `implemented`) and public routes (file download).
			const specials = (c.specials ?? []).filter((s) => s.implemented).length + publicCollectionRoutes().filter((r) => r.collection === c).length;
			expect(ops).toHaveLength(Object.keys(STANDARD_OPS).length + specials);
			expect(ops).toHaveLength(11 + specials);
			for (const o of ops) ids.add(o.operationId);
		}
		const all = Object.values(doc.paths as Obj)
			.flatMap((item: Obj) => Object.values(item))
			.map((o: Obj) => o.operationId);
		expect(new Set(all).size).toBe(all.length);
		const specials = COLLECTIONS.reduce((n, { collection: c }) => n + (c.specials ?? []).filter((s) => s.implemented).length, 0);
		expect(ids.size).toBe(COLLECTIONS.length * 11 + specials + publicCollectionRoutes().length);
		expect(op("/auth/token", "post").tags).toEqual(["auth"]);
	});

	it("uses the spec's envelopes", () => {
		const base = "/content/notes";
		const note = view("ContentNotes");
		expect(content(op(base, "get"))).toEqual({
			type: "object",
			required: ["items", "total"],
			properties: { items: { type: "array", items: note }, total: { type: "integer", minimum: 0 } },
		});
		expect(content(op(`${base}/count`, "get"))).toEqual({ type: "object", required: ["total"], properties: { total: { type: "integer", minimum: 0 } } });
		expect(content(op(`${base}/{id}`, "get"))).toEqual({ type: "object", required: ["data"], properties: { data: note } });
		expect(content(op(base, "post")).properties.data).toEqual(note);
		expect(content(op(`${base}/{id}`, "patch")).properties.data).toEqual(note);
		expect(content(op(`${base}/bulk`, "patch")).required).toEqual(["total"]);
		expect(op(`${base}/cursor`, "get").responses["200"].content["text/event-stream"].schema.type).toBe("string");
		expect(op(`${base}/cursor`, "get").responses["200"].description).toContain("event: end");
		expect(content(op("/auth/token", "post")).properties.data).toEqual({ $ref: "#/components/schemas/TokenResponse" });
		expect(content(op("/auth/verify", "get")).properties.data).toEqual({ $ref: "#/components/schemas/TokenClaims" });
	});

	it("has request bodies for creates and patches", () => {
		const body = (o: Obj) => o.requestBody.content["application/json"].schema;
		expect(body(op("/content/notes", "post"))).toEqual({ $ref: "#/components/schemas/ContentNotesCreate" });
		expect(body(op("/content/notes/{id}", "patch"))).toEqual({ $ref: "#/components/schemas/ContentNotesPatch" });
		expect(body(op("/content/notes/bulk", "patch"))).toEqual({ $ref: "#/components/schemas/ContentNotesPatch" });
		const bulk = body(op("/content/notes/bulk", "post"));
		expect(bulk.required).toEqual(["items"]);
		expect(bulk.properties.items.items).toEqual({ $ref: "#/components/schemas/ContentNotesCreate" });
		expect(bulk.properties.items.maxItems).toBe(OPENAPI_MAX_BULK);
		expect(OPENAPI_MAX_BULK).toBe(MAX_BULK);

		const create = doc.components.schemas.ContentNotesCreate;
		expect(create.additionalProperties).toBe(false);
		expect(create.required).toEqual(["title"]);
		expect(create.properties.id).toBeUndefined();
		expect(create.properties.created_at).toBeUndefined();
		expect(create.properties.ref).toBeDefined();
		const patch = doc.components.schemas.ContentNotesPatch;
		expect(patch.required).toBeUndefined();
		expect(patch.minProperties).toBe(1);
		expect(patch.additionalProperties).toBe(false);
	});

	it("declares the parameters of the standard pattern", () => {
		for (const p of ["/content/notes", "/content/notes/count", "/content/notes/cursor"]) {
			const names = paramNames(op(p, "get"));
			for (const n of ["query:query", "query:pagination", "query:projection", "query:populate", "query:zone", "header:x-zone", "header:x-exclude-soft-delete-query", "query:token"])
				expect(names).toContain(n);
		}
		const get = paramNames(op("/content/notes/{id}", "get"));
		expect(get).toEqual(expect.arrayContaining(["path:id", "query:ref", "query:token"]));
		expect(paramNames(op("/auth/verify", "get"))).toContain("query:token");
		expect(paramNames(op("/auth/token", "post"))).not.toContain("query:token");
		// Every path template variable is declared as a required path parameter.
		for (const [path, item] of Object.entries(doc.paths as Obj))
			for (const o of Object.values(item as Obj)) {
				const vars = [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]);
				const declared = (o.parameters ?? []).map(resolve).filter((p: Obj) => p.in === "path");
				expect(declared.map((p: Obj) => p.name).sort()).toEqual(vars.sort());
				for (const p of declared) expect(p.required).toBe(true);
			}
	});

	it("describes errors with the Error schema", () => {
		expect(doc.components.schemas.Error).toEqual({
			type: "object",
			description: expect.any(String),
			required: ["statusCode", "message", "error"],
			properties: {
				statusCode: expect.objectContaining({ type: "integer" }),
				message: expect.objectContaining({ type: "string" }),
				error: expect.objectContaining({ type: "string" }),
			},
		});
		const get = op("/content/notes/{id}", "get");
		for (const code of ["400", "401", "403", "404", "502"]) expect(resolve(get.responses[code]).content["application/json"].schema).toEqual({ $ref: "#/components/schemas/Error" });
		const create = op("/content/notes", "post");
		for (const code of ["409", "413"]) expect(create.responses[code]).toBeDefined();
		expect(op("/auth/token", "post").responses["429"]).toBeDefined();
		expect(op("/touch/push-histories", "post").responses["405"]).toBeDefined();
	});

	it("has a bearer scheme, global security, and a public /auth/token (client credentials also in HTTP Basic)", () => {
		expect(doc.components.securitySchemes.bearer).toMatchObject({ type: "http", scheme: "bearer", bearerFormat: "JWT or APT" });
		// The same bearer also as `?token=` and as the `authorization` cookie.
		expect(doc.security).toEqual([{ bearer: [] }, { tokenQuery: [] }, { tokenCookie: [] }]);
		expect(doc.components.securitySchemes.tokenQuery).toMatchObject({ type: "apiKey", in: "query", name: "token" });
		expect(doc.components.securitySchemes.tokenCookie).toMatchObject({ type: "apiKey", in: "cookie", name: "authorization" });
		expect(op("/auth/token", "post").security).toEqual([{}, { clientBasic: [] }]);
		for (const r of allRoutes().filter((x) => !x.public)) expect(op(toOpenApiPath(r.path), r.method.toLowerCase()).security).toBeUndefined();
	});

	it("marks write-only fields in the document schemas and maps formats", () => {
		const users = doc.components.schemas.IdentityUsers;
		expect(users.properties.password.writeOnly).toBe(true);
		expect(users.properties.username.writeOnly).toBeUndefined();
		const pushes = doc.components.schemas.TouchPushes;
		expect(pushes.properties.keys.writeOnly).toBe(true);
		expect(pushes.required).not.toContain("keys");
		expect(doc.components.schemas.TouchPushesCreate.required).toContain("keys");
		expect(pushes.properties.id).toMatchObject({ type: "string", pattern: "^[0-9a-f]{24}$", readOnly: true });
		expect(pushes.properties.created_at).toMatchObject({ type: "string", format: "date-time" });
		expect(pushes.properties.endpoint).toMatchObject({ format: "uri" });
		expect(doc.components.schemas.EssentialSagas.properties.job).toMatchObject({ format: "uuid" });
		expect(users.properties.email.type).toContain("string");
		expect(users.properties.email.format).toBe("email");
		expect(users.properties.status.enum).toEqual(expect.arrayContaining(["ACTIVE", "INACTIVE"]));
		expect(doc.components.schemas.IdentityUsersCreate.anyOf).toEqual([{ required: ["username"] }, { required: ["email"] }, { required: ["phone"] }]);
		// Values revealed once by a create response.
		expect(doc.components.schemas.AuthAptsCreated.properties.token.writeOnly).toBeUndefined();
		expect(content(op("/auth/apts", "post")).properties.data).toEqual(view("AuthApts", "AuthAptsCreated"));
		for (const { domain: d, collection: c } of COLLECTIONS) for (const suffix of ["", "Create", "Patch"]) expect(doc.components.schemas[schemaName(d, c) + suffix]).toBeDefined();
	});

	it("has the spec's auth schemas", () => {
		for (const n of ["TokenRequest", "TokenResponse", "TokenClaims", "CanRequest", "CanResponse", "TotpCheck", "ApiToken", "Grant"])
			expect(doc.components.schemas[n]).toBeDefined();
		// client_id (and client_secret) also come as `Authorization: Basic`: the body alone cannot require them.
		expect(doc.components.schemas.TokenRequest.required).toEqual(["grant_type"]);
		expect(doc.components.schemas.TokenForm.required).toEqual(["grant_type"]);
		expect(doc.components.schemas.TokenForm.properties.scope.type).toBe("string");
		expect(doc.components.schemas.TokenRequest.properties.grant_type.enum).toEqual(["password", "refresh_token", "client_credential", "authorization_code", "client_credentials"]);
	});

	it("is JSON-serializable and every $ref resolves", () => {
		const text = JSON.stringify(doc);
		expect(JSON.parse(text)).toEqual(doc);
		const missing: string[] = [];
		let refs = 0;
		const walk = (v: unknown, at: string) => {
			if (Array.isArray(v)) v.forEach((x, i) => walk(x, `${at}/${i}`));
			else if (v && typeof v === "object")
				for (const [k, x] of Object.entries(v)) {
					if (k === "$ref") {
						refs++;
						const target = String(x).startsWith("#/")
							? String(x)
									.slice(2)
									.split("/")
									.reduce((o: any, key) => o?.[key], doc)
							: undefined;
						if (target === undefined) missing.push(`${at}: ${String(x)}`);
					} else walk(x, `${at}/${k}`);
				}
		};
		walk(doc, "#");
		expect(missing).toEqual([]);
		expect(refs).toBeGreaterThan(100);
	});
});

describe("special actions in the OpenAPI document", () => {
	const doc = openApiDocument() as any;
	test("the saga and financial operations are described with their bodies, answers and scopes; unbuilt specials are absent", () => {
		const start = doc.paths["/essential/sagas/start"].post;
		expect(start.operationId).toBe("essential_sagas_start");
		expect(start.description).toContain("start:essential:sagas");
		expect(start.requestBody.content["application/json"].schema).toMatchObject({ required: ["ttl"], properties: { ttl: { type: "integer", minimum: 5 } } });
		expect(start.responses["200"].content["application/json"].schema.properties.data).toEqual(view("EssentialSagas"));
		expect(doc.paths["/essential/sagas/add"].post.responses["200"].content["application/json"].schema.properties.data).toEqual(view("EssentialSagaStages"));
		for (const op of ["abort", "commit"]) {
			const o = doc.paths[`/essential/sagas/{id}/${op}`].get;
			expect(o.description).toContain(`${op}:essential:sagas`);
			expect(Object.keys(o.responses)).toEqual(expect.arrayContaining(["200", "404", "409"]));
		}
		expect(doc.paths["/financial/transactions/init"].post.requestBody.content["application/json"].schema.required).toEqual(["amount"]);
		expect(doc.paths["/financial/transactions/{id}/verify"].get).toBeDefined();
		expect(doc.paths["/financial/transactions/{id}/abort"].get.description).toContain("init:financial:transactions");
		expect(doc.paths["/financial/invoices/{id}/payment"].post.requestBody.content["application/json"].schema.required).toEqual(["wallet"]);
		for (const { domain: d, collection: c } of COLLECTIONS)
			for (const s of (c.specials ?? []).filter((x) => !x.implemented))
				expect(doc.paths[`/${d.name}/${c.name}/${s.path.replace(":id", "{id}")}`]?.[s.method.toLowerCase()]).toBeUndefined();
		// Internal fields never appear, platform-set ones are read-only and not in the create body.
		expect(doc.components.schemas.EssentialSagaStages.properties.images).toBeUndefined();
		expect(doc.components.schemas.EssentialSagas.properties.expires_at.readOnly).toBe(true);
		expect(doc.components.schemas.EssentialSagasCreate.properties.expires_at).toBeUndefined();
		expect(doc.components.schemas.FinancialWalletsPatch.properties.balance).toBeUndefined();
	});
});
