/**
 * Issue 13 item 4: OAuth clients work as they are. POST /auth/token takes an application/x-www-form-urlencoded body
 * (RFC 6749 §4, Appendix B), the RFC's `client_credentials` as an alias of the spec's `client_credential`, the
 * space-delimited `scope` parameter, and client credentials in HTTP Basic (RFC 6749 §2.3.1).
 */
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { clearLoginFailures, createClient, errorBody, payloadOf } from "../helpers/auth";

let p: TestPlatform;
let acme: { id: string; secret: string };

const form = (fields: Record<string, string | string[]>, headers: Record<string, string> = {}) => {
	const q = new URLSearchParams();
	for (const [k, v] of Object.entries(fields)) for (const x of Array.isArray(v) ? v : [v]) q.append(k, x);
	return p.http("POST", "/auth/token", { raw: q.toString(), headers: { "content-type": "application/x-www-form-urlencoded", ...headers } });
};
const basic = (id: string, secret: string) => `Basic ${Buffer.from(`${encodeURIComponent(id)}:${encodeURIComponent(secret)}`).toString("base64")}`;

beforeAll(async () => {
	p = await bootPlatform();
	const root = await p.rootToken();
	acme = await createClient(p.http, root, { name: "acme-oauth", domains: ["acme-oauth.test"], scopes: ["read:content", "write:content:notes"] });
});
afterAll(() => p.cleanup());
beforeEach(() => clearLoginFailures(p));

describe("POST /auth/token with a form body (RFC 6749 §4)", () => {
	test("password grant as a form: 200 with a bearer token", async () => {
		const r = await form({ grant_type: "password", client_id: p.root.client_id, username: p.root.username, password: p.root.password });
		expect(r.status).toBe(200);
		expect(r.body.data.token_type).toBe("Bearer");
		expect(payloadOf(r.body.data.access_token).uid).toBe(p.root.user_id);
		expect(typeof r.body.data.refresh_token).toBe("string");
	});

	test("client_credentials (RFC spelling) as a form: 200, the same as client_credential", async () => {
		const r = await form({ grant_type: "client_credentials", client_id: acme.id, client_secret: acme.secret });
		expect(r.status).toBe(200);
		expect(payloadOf(r.body.data.access_token).cid).toBe(acme.id);
		expect(r.body.data.refresh_token).toBeUndefined();
	});

	test("client_credentials (RFC spelling) in JSON: 200", async () => {
		const r = await p.http("POST", "/auth/token", { body: { grant_type: "client_credentials", client_id: acme.id, client_secret: acme.secret } });
		expect(r.status).toBe(200);
		expect(payloadOf(r.body.data.access_token).cid).toBe(acme.id);
	});

	test("client credentials in HTTP Basic (RFC 6749 §2.3.1) with the space-delimited scope parameter", async () => {
		const r = await form({ grant_type: "client_credentials", scope: "read:content" }, { authorization: basic(acme.id, acme.secret) });
		expect(r.status).toBe(200);
		expect(r.body.data.scope).toBe("read:content");
	});

	test("a wrong secret in HTTP Basic: 401 naming the client", async () => {
		const r = await form({ grant_type: "client_credentials" }, { authorization: basic(acme.id, "wrong") });
		expect(r.status).toBe(401);
		expect(r.body).toEqual(errorBody(401, `client secret is invalid for client ${acme.id}`));
	});

	test("a form without grant_type: 400 grant_type is required (the same checks as JSON)", async () => {
		const r = await form({ client_id: acme.id });
		expect(r.status).toBe(400);
		expect(r.body).toEqual(errorBody(400, "grant_type is required"));
	});

	test("an unknown grant in a form: 400 naming the accepted ones", async () => {
		const r = await form({ grant_type: "implicit", client_id: acme.id });
		expect(r.status).toBe(400);
		expect(r.body).toEqual(errorBody(400, "grant_type must be one of password, refresh_token, client_credential, authorization_code"));
	});

	test("a parameter given twice: 400 (RFC 6749 §3.2)", async () => {
		const r = await form({ grant_type: ["password", "client_credentials"], client_id: acme.id });
		expect(r.status).toBe(400);
		expect(r.body).toEqual(errorBody(400, "grant_type must be given once"));
	});

	test("client credentials twice (Basic and client_secret): 400", async () => {
		const r = await form({ grant_type: "client_credentials", client_secret: acme.secret }, { authorization: basic(acme.id, acme.secret) });
		expect(r.status).toBe(400);
		expect(r.body).toEqual(errorBody(400, "client credentials are given twice (Authorization: Basic and client_secret): use one"));
	});

	test("a client_id in the body that differs from Basic's: 400", async () => {
		const r = await form({ grant_type: "client_credentials", client_id: p.root.client_id }, { authorization: basic(acme.id, acme.secret) });
		expect(r.status).toBe(400);
		expect(r.body).toEqual(errorBody(400, "client_id differs from the client of Authorization: Basic"));
	});

	test("a form field the token request does not have: 400 naming it", async () => {
		const r = await form({ grant_type: "client_credentials", client_id: acme.id, client_secret: acme.secret, audience: "x" });
		expect(r.status).toBe(400);
		expect(r.body).toEqual(errorBody(400, "audience is not a field of a token request"));
	});

	test("strict=true in a form is the boolean flag", async () => {
		const r = await form({ grant_type: "client_credentials", client_id: acme.id, client_secret: acme.secret, strict: "true" });
		expect(r.status).toBe(200);
		expect(payloadOf(r.body.data.access_token).strict).toBe(true);
	});

	test("other routes still refuse a form body (JSON only): 415 saying what to send", async () => {
		const root = await p.rootToken();
		const r = await p.http("POST", "/content/notes", { token: root, raw: "title=x", headers: { "content-type": "application/x-www-form-urlencoded" } });
		expect(r.status).toBe(415);
		expect(r.body.message).toBe(
			"this endpoint reads a JSON body: send Content-Type: application/json, not application/x-www-form-urlencoded (curl -d sends a form: add -H 'Content-Type: application/json')",
		);
	});
});
