/**
 * Issue 33 item 6 against the running server: what the OpenAPI document declares for the gateway's own routes and
 * the token endpoint is what it answers. `/metrics` under METRICS_TOKEN (401 in the error shape), the token request
 * exactly as docs/getting-started.md sends it (curl's form and HTTP Basic, two tenants' clients), and
 * `/api-json/{service}`. Each exchange, request and answer, is checked against the served document.
 */
import { execFile } from "child_process";
import { promisify } from "util";
import { createClient, errorBody } from "../helpers/auth";
import { openApiChecker, type Exchange, type OpenApiChecker } from "../helpers/openapi-check";
import { bootPlatform, type HttpOptions, type TestPlatform } from "../helpers/platform";

jest.setTimeout(120_000);

const METRICS_TOKEN = "metrics-token-of-the-openapi-suite";
let p: TestPlatform;
let checker: OpenApiChecker;
let acme: { id: string; secret: string };
let globex: { id: string; secret: string };

beforeAll(async () => {
	p = await bootPlatform({ metricsToken: METRICS_TOKEN });
	checker = openApiChecker((await p.http("GET", "/api-json")).body);
	const root = await p.rootToken();
	acme = await createClient(p.http, root, { name: "acme-doc", domains: ["acme-doc.example"], scopes: ["read:content"] });
	globex = await createClient(p.http, root, { name: "globex-doc", domains: ["globex-doc.example"], scopes: ["read:content"] });
});
afterAll(() => p?.cleanup());

/** A request through the test client, with what the checker needs of it. */
async function exchange(method: string, path: string, opts: HttpOptions & { headers?: Record<string, string> } = {}) {
	const r = await p.http(method, path, opts);
	const ex: Exchange = {
		method,
		url: path,
		requestHeaders: Object.fromEntries(Object.entries({ ...(opts.token ? { authorization: `Bearer ${opts.token}` } : {}), ...opts.headers }).map(([k, v]) => [k.toLowerCase(), v])),
		requestBody: "",
		status: r.status,
		responseHeaders: { "content-type": r.headers.get("content-type") ?? "" },
		responseText: r.text,
	};
	return { r, problems: checker.check(ex) };
}

describe("GET /metrics with METRICS_TOKEN", () => {
	test("without its bearer, or with another: 401 in the error shape, with WWW-Authenticate, as declared", async () => {
		for (const headers of [
			{} as Record<string, string>,
			{ authorization: "Bearer not-the-metrics-token" },
			{ authorization: `Basic ${Buffer.from(`x:${METRICS_TOKEN}`).toString("base64")}` },
		]) {
			const { r, problems } = await exchange("GET", "/metrics", { headers });
			expect({ status: r.status, body: r.body, challenge: r.headers.get("www-authenticate") }).toEqual({
				status: 401,
				body: errorBody(401, "metrics token is required"),
				challenge: "Bearer",
			});
			expect(problems).toEqual([]);
		}
	});

	test("with it: 200, the text exposition, as declared", async () => {
		const { r, problems } = await exchange("GET", "/metrics", { headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
		expect(r.status).toBe(200);
		expect(r.text).toContain("# TYPE");
		expect(problems).toEqual([]);
	});
});

describe("POST /auth/token as the guide sends it: curl -u <client_id>:<secret> -d grant_type=client_credentials", () => {
	/** The guide's own command line (curl, in a child process: the platform answers from this one); its answer. */
	const curl = async (user: string) => {
		const { stdout: out } = await promisify(execFile)(
			"curl",
			["-sS", "-w", "\n%{http_code}\n%{content_type}", `${p.url}/auth/token`, "-u", user, "-d", "grant_type=client_credentials"],
			{ encoding: "utf8" },
		);
		const [body, status, type] = out.trimEnd().split("\n");
		const ex: Exchange = {
			method: "POST",
			url: "/auth/token",
			requestHeaders: { authorization: `Basic ${Buffer.from(user).toString("base64")}`, "content-type": "application/x-www-form-urlencoded" },
			requestBody: "grant_type=client_credentials",
			status: Number(status),
			responseHeaders: { "content-type": type },
			responseText: body,
		};
		return { status: Number(status), body: JSON.parse(body), problems: checker.check(ex) };
	};

	test("the right secret: the client's token; the wrong one: 401 naming the client", async () => {
		const good = await curl(`${acme.id}:${acme.secret}`);
		expect({ status: good.status, type: good.body.data.token_type, scope: good.body.data.scope, problems: good.problems }).toEqual({
			status: 200,
			type: "Bearer",
			scope: "read:content",
			problems: [],
		});
		const bad = await curl(`${acme.id}:not-the-secret`);
		expect({ status: bad.status, body: bad.body, problems: bad.problems }).toEqual({
			status: 401,
			body: errorBody(401, `client secret is invalid for client ${acme.id}`),
			problems: [],
		});
	});

	test("another tenant's secret for this client: 401 naming the client asked for, never a token of either", async () => {
		const crossed = await curl(`${acme.id}:${globex.secret}`);
		expect({ status: crossed.status, body: crossed.body }).toEqual({ status: 401, body: errorBody(401, `client secret is invalid for client ${acme.id}`) });
		const other = await curl(`${globex.id}:${acme.secret}`);
		expect({ status: other.status, body: other.body }).toEqual({ status: 401, body: errorBody(401, `client secret is invalid for client ${globex.id}`) });
	});
});

describe("GET /api-json/{service}", () => {
	test("a service's document, as declared; an unknown name: 404 listing the services", async () => {
		const one = await exchange("GET", "/api-json/content");
		expect(one.r.status).toBe(200);
		expect(Object.keys(one.r.body.paths).every((x) => x.startsWith("/content/"))).toBe(true);
		expect(one.problems).toEqual([]);
		const none = await exchange("GET", "/api-json/nope");
		expect(none.r.status).toBe(404);
		expect(none.r.body.message).toMatch(/^no API document for 'nope' \(services: auth, .*; the whole API: \/api-json\)$/);
		// The path parameter's enum names the services: a validating client would not send this one; the 404 is declared.
		expect(none.problems).toEqual(["GET /api-json/{service}: path parameter service: data must be equal to one of the allowed values"]);
	});
});
