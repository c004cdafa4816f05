/**
 * Messages that guide (issue "Operating it", item 7), on both document stores: a token request that is not one never
 * echoes its values; a body without Content-Type, or of a type the endpoint does not read, says so; a bearer that is
 * no token answers `authorization token is required` and says why in WWW-Authenticate; a user's password has at least
 * 8 characters.
 */
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { clearLoginFailures, errorBody } from "../helpers/auth";
import { head, rawRequest } from "../helpers/raw-http";

describe("messages that guide,", () => {
	let p: TestPlatform;
	let root: string;
	let port: number;
	beforeAll(async () => {
		p = await bootPlatform({});
		root = await p.rootToken();
		port = Number(new URL(p.url).port);
	}, 120_000);
	afterAll(() => p?.cleanup());
	// Wrong logins of this suite must not reach the failed-login limit.
	beforeEach(() => clearLoginFailures(p));

	const login = () => ({ grant_type: "password", client_id: p.root.client_id, username: p.root.username, password: p.root.password });
	const form = (path: string, text: string, token?: string) => p.http("POST", path, { raw: text, token, headers: { "content-type": "application/x-www-form-urlencoded" } });
	/** A body sent with no Content-Type at all (fetch would add text/plain). */
	const untyped = (path: string, text: string, token?: string) =>
		rawRequest(port, head(port, "POST", path, { "Content-Length": Buffer.byteLength(text), ...(token ? { Authorization: `Bearer ${token}` } : {}) }), { chunks: [text] });

	describe("a token request that is not one never echoes its values", () => {
		test("a JSON text sent as a form (curl -d without -H): 400 saying so, without the body", async () => {
			const r = await form("/auth/token", JSON.stringify(login()));
			expect(r.status).toBe(400);
			expect(r.body).toEqual(errorBody(400, "the body is JSON but its Content-Type is application/x-www-form-urlencoded: send Content-Type: application/json"));
			expect(r.text).not.toContain(p.root.password);
		});

		test("a JSON object whose keys are no field names: 400 without the keys", async () => {
			const secret = `password=${p.root.password}&grant_type=password`;
			const r = await p.http("POST", "/auth/token", { body: { [secret]: "" } });
			expect(r.body).toEqual(errorBody(400, "the body is not a token request: give grant_type, client_id, client_secret, ... as a JSON object or a form"));
			expect(r.text).not.toContain(p.root.password);
			// A field-like name is still named, so a typo is found.
			expect((await p.http("POST", "/auth/token", { body: { ...login(), passwort: "x" } })).body).toEqual(errorBody(400, "passwort is not a field of a token request"));
		});
	});

	describe("a body's media type", () => {
		test("a JSON body without Content-Type: 400 naming the missing content-type", async () => {
			const note = await untyped("/content/notes", JSON.stringify({ title: "no type" }), root);
			expect(note).toEqual({ status: 400, body: errorBody(400, "content-type is missing: send the body with Content-Type: application/json") });
			const token = await untyped("/auth/token", JSON.stringify(login()));
			expect(token).toEqual({
				status: 400,
				body: errorBody(400, "content-type is missing: send the body with Content-Type: application/json or application/x-www-form-urlencoded"),
			});
			expect(JSON.stringify(token.body)).not.toContain(p.root.password);
		});

		test("a form body on a JSON endpoint: 415 saying what to send", async () => {
			const r = await form("/content/notes", JSON.stringify({ title: "a form" }), root);
			expect(r.status).toBe(415);
			expect(r.body).toEqual({
				statusCode: 415,
				error: "Unsupported Media Type",
				message:
					"this endpoint reads a JSON body: send Content-Type: application/json, not application/x-www-form-urlencoded (curl -d sends a form: add -H 'Content-Type: application/json')",
			});
			const text = await p.http("PATCH", "/content/notes/0123456789abcdef01234567", { raw: "{}", token: root, headers: { "content-type": "text/plain;charset=UTF-8" } });
			expect(text.body).toEqual({
				statusCode: 415,
				error: "Unsupported Media Type",
				message: "this endpoint reads a JSON body: send Content-Type: application/json, not text/plain",
			});
			// The token endpoint reads both, and a request without a body needs no type.
			expect((await form("/auth/token", new URLSearchParams(login()).toString())).status).toBe(200);
			expect((await p.http("POST", "/content/notes", { body: { title: "typed" }, token: root })).status).toBe(200);
			expect((await rawRequest(port, head(port, "POST", "/essential/sagas/start", { Authorization: `Bearer ${root}`, "Content-Length": 0 }))).body).toEqual(
				errorBody(400, expect.stringMatching(/ttl/)),
			);
		});
	});

	test("a bearer that is no token, or none: 401 `authorization token is required`, the reason in WWW-Authenticate", async () => {
		const NOT_OURS = 'Bearer error="invalid_token", error_description="not a token of this platform"';
		for (const bad of ["not-a-token", `${root.slice(0, -3)}abc`, "APT-short"]) {
			const r = await p.http("GET", "/content/notes", { token: bad });
			expect({ bad, status: r.status, body: r.body, challenge: r.headers.get("www-authenticate") }).toEqual({
				bad,
				status: 401,
				body: errorBody(401, "authorization token is required"),
				challenge: NOT_OURS,
			});
		}
		const query = await p.http("GET", "/content/notes?token=garbage");
		expect([query.body, query.headers.get("www-authenticate")]).toEqual([errorBody(401, "authorization token is required"), NOT_OURS]);
		const none = await p.http("GET", "/content/notes");
		expect([none.body, none.headers.get("www-authenticate")]).toEqual([errorBody(401, "authorization token is required"), "Bearer"]);
	});

	test("a user's password has at least 8 characters (NIST SP 800-63B), on create, bulk create and patch", async () => {
		const TOO_SHORT = errorBody(400, "password must be at least 8 characters (NIST SP 800-63B)");
		expect((await p.http("POST", "/identity/users", { token: root, body: { username: "shorty", password: "Seven-7" } })).body).toEqual(TOO_SHORT);
		expect((await p.http("POST", "/identity/users/bulk", { token: root, body: { items: [{ username: "shorty2", password: "1234567" }] } })).body).toEqual(TOO_SHORT);
		const u = await p.http("POST", "/identity/users", { token: root, body: { username: "eighty", password: "Eight-8!" } });
		expect(u.status).toBe(200);
		expect((await p.http("PATCH", `/identity/users/${u.body.data.id}`, { token: root, body: { password: "short" } })).body).toEqual(TOO_SHORT);
		// Characters, not bytes: eight code points pass.
		expect((await p.http("PATCH", `/identity/users/${u.body.data.id}`, { token: root, body: { password: "pässwörd" } })).status).toBe(200);
		expect((await p.http("POST", "/auth/token", { body: { ...login(), username: "eighty", password: "pässwörd" } })).status).toBe(200);
	});
});
