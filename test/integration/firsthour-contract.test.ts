/**
 * Issue 13 item 9: the OpenAPI document against the real server. Representative traffic of every route kind (token,
 * the collection operations with and without projection, errors, the other bearer carriers, health, metrics) is
 * recorded, and every response is validated with ajv (JSON Schema 2020-12, the dialect of OpenAPI 3.1) against the
 * schema /api-json declares for that operation and status. Any response that breaks the document fails the test.
 */
import { openApiChecker, type OpenApiChecker } from "../helpers/openapi-check";
import { bootPlatform, type HttpOptions, type TestPlatform } from "../helpers/platform";

// A platform start and some thirty requests: more than the default 30 s on a loaded machine.
jest.setTimeout(120_000);

let p: TestPlatform;
let checker: OpenApiChecker;
const recorded: Array<{ method: string; url: string; status: number; responseHeaders: Record<string, string>; responseText: string }> = [];

async function call(method: string, path: string, opts: HttpOptions = {}) {
	const r = await p.http(method, path, opts);
	recorded.push({ method, url: path, status: r.status, responseHeaders: { "content-type": r.headers.get("content-type") ?? "" }, responseText: r.text });
	return r;
}

beforeAll(async () => {
	p = await bootPlatform();
	checker = openApiChecker((await p.http("GET", "/api-json")).body);

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
	expect(recorded.length).toBeGreaterThanOrEqual(25);
	expect(recorded.flatMap((r) => checker.checkAnswer(r))).toEqual([]);
});
