/**
 * Issue 13 item 9: the OpenAPI document against the real server. Representative traffic of every route kind (token,
 * the collection operations with and without projection, errors, the other bearer carriers, health, metrics) is
 * recorded, and every response is validated with ajv (JSON Schema 2020-12, the dialect of OpenAPI 3.1) against the
 * schema /api-json declares for that operation and status. Any response that breaks the document fails the test.
 */
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import { bootPlatform, type HttpOptions, type TestPlatform } from "../helpers/platform";

type Obj = Record<string, any>;
let p: TestPlatform;
let doc: Obj;
let ajv: Ajv2020;
const recorded: Array<{ method: string; path: string; status: number; type: string; body: unknown; text: string }> = [];

async function call(method: string, path: string, opts: HttpOptions = {}) {
	const r = await p.http(method, path, opts);
	recorded.push({ method, path, status: r.status, type: r.headers.get("content-type") ?? "", body: r.body, text: r.text });
	return r;
}

/** The document's operation for a concrete method and path (templated segments match any value). */
function operationOf(method: string, path: string): { template: string; op: Obj } | undefined {
	const bare = path.split("?")[0];
	const candidates = Object.keys(doc.paths).filter((t) => {
		const re = new RegExp(`^${t.replace(/[.*+?^$()|[\]\\]/g, "\\$&").replace(/\\\{[^}]+\\\}|\{[^}]+\}/g, "[^/]+")}$`);
		return re.test(bare) && doc.paths[t][method.toLowerCase()];
	});
	// The most literal template wins (`/content/notes/count` before `/content/notes/{id}`).
	candidates.sort((a, b) => (a.match(/\{/g)?.length ?? 0) - (b.match(/\{/g)?.length ?? 0));
	const t = candidates[0];
	return t ? { template: t, op: doc.paths[t][method.toLowerCase()] } : undefined;
}

function deref(o: Obj): Obj {
	while (o && o.$ref) {
		const parts = String(o.$ref).replace(/^#\//, "").split("/").map((x) => x.replace(/~1/g, "/").replace(/~0/g, "~"));
		o = parts.reduce((a: Obj, k) => a?.[k], doc);
	}
	return o;
}

beforeAll(async () => {
	p = await bootPlatform();
	doc = (await p.http("GET", "/api-json")).body;
	ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false });
	addFormats(ajv);
	ajv.addSchema(doc, "api");

	const root = await p.rootToken();
	const t = { token: root };
	// Tokens, in JSON and as a form, and a failed login.
	await call("POST", "/auth/token", { body: { grant_type: "password", client_id: p.root.client_id, username: p.root.username, password: p.root.password } });
	await call("POST", "/auth/token", { body: { grant_type: "password", client_id: p.root.client_id, username: p.root.username, password: "wrong" } });
	await call("GET", "/auth/verify", t);
	// The collection operations.
	const created = await call("POST", "/content/notes", { ...t, body: { title: "contract", content: "body", tags: ["a"] } });
	const id = created.body.data.id;
	await call("POST", "/content/notes/bulk", { ...t, body: { items: [{ title: "b1" }, { title: "b2" }] } });
	await call("GET", "/content/notes", t);
	await call("GET", `/content/notes?projection=${encodeURIComponent(JSON.stringify({ content: 1 }))}`, t);
	await call("GET", `/content/notes/${id}?projection=${encodeURIComponent(JSON.stringify({ tags: 1 }))}`, t);
	await call("GET", `/content/notes/${id}`, t);
	await call("GET", "/content/notes/count", t);
	await call("PATCH", `/content/notes/${id}`, { ...t, body: { title: "changed" } });
	await call("PATCH", `/content/notes/bulk?query=${encodeURIComponent(JSON.stringify({ title: "b1" }))}`, { ...t, body: { content: "x" } });
	await call("DELETE", `/content/notes/${id}`, t);
	await call("PUT", `/content/notes/${id}/restore`, t);
	// Users, clients (a revealed secret), grants, configs.
	await call("POST", "/identity/users", { ...t, body: { username: "contract-user", password: "Contract-Pass-1!", subjects: ["@editor"] } });
	await call("GET", "/identity/users", t);
	await call("POST", "/domain/clients", { ...t, body: { name: "contract", domains: ["contract.example"], scopes: ["read:content"] } });
	await call("POST", "/auth/grants", { ...t, body: { subject: `@editor@${p.root.domain}`, action: "read", object: "content:notes" } });
	await call("GET", "/auth/grants", t);
	await call("POST", "/context/configs", { ...t, body: { key: "theme", value: { dark: true } } });
	// Errors.
	await call("POST", "/content/notes", { ...t, body: {} });
	await call("GET", "/content/notes/0123456789abcdef01234567", t);
	await call("GET", "/content/notes");
	await call("POST", "/auth/grants", { ...t, body: { subject: "@editor", action: "read", object: "content:notes" } });
	// The other bearer carriers.
	await call("GET", `/content/notes/count?token=${encodeURIComponent(root)}`);
	await call("GET", "/content/notes/count", { headers: { cookie: `authorization=${encodeURIComponent(root)}` } });
	// Health and metrics.
	await call("GET", "/status");
	await call("GET", "/metrics");
});
afterAll(() => p.cleanup());

test("every recorded response is declared by the document and valid against its schema", () => {
	const problems: string[] = [];
	for (const r of recorded) {
		const found = operationOf(r.method, r.path);
		if (!found) {
			problems.push(`${r.method} ${r.path}: no operation in the document`);
			continue;
		}
		const responses = found.op.responses ?? {};
		const declared = responses[String(r.status)] ?? responses[`${String(r.status)[0]}XX`] ?? responses.default;
		if (!declared) {
			problems.push(`${r.method} ${found.template} -> ${r.status}: status not declared (declared: ${Object.keys(responses).join(", ")})`);
			continue;
		}
		const response = deref(declared);
		const media = Object.keys(response.content ?? {}).find((m) => r.type.startsWith(m));
		if (!media) {
			if (response.content) problems.push(`${r.method} ${found.template} -> ${r.status}: content type ${r.type} not declared`);
			continue;
		}
		const schema = response.content[media].schema;
		if (!schema || !media.includes("json")) continue;
		const v = ajv.compile(resolveSchemaRef(schema));
		if (!v(r.body)) problems.push(`${r.method} ${found.template} -> ${r.status}: ${ajv.errorsText(v.errors)} in ${r.text.slice(0, 300)}`);
	}
	expect(recorded.length).toBeGreaterThanOrEqual(25);
	expect(problems).toEqual([]);
});

/** A response schema, its $refs pointing into the document registered as `api`. */
function resolveSchemaRef(schema: Obj): Obj {
	return JSON.parse(JSON.stringify(schema).replace(/"\$ref":"#\//g, '"$ref":"api#/'));
}
