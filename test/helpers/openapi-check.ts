/**
 * Checks real HTTP exchanges against the OpenAPI document the platform serves, as a validating proxy (Prism's
 * `--errors`) would: the request has an operation, takes only declared query parameters, carries a credential its
 * security asks for and a body of a declared type that is valid against its schema; the answer's status and type
 * are declared and a JSON body is valid against the schema of that status. JSON Schema 2020-12 (the dialect of
 * OpenAPI 3.1) with ajv. Each problem is one line naming the request; none means the exchange is as documented.
 */
import Ajv2020, { type ValidateFunction } from "ajv/dist/2020";
import addFormats from "ajv-formats";
import http from "http";
import type { AddressInfo } from "net";

type Obj = Record<string, any>;

export interface Exchange {
	method: string;
	/** Path and query string, as sent. */
	url: string;
	requestHeaders: Record<string, string | string[] | undefined>;
	requestBody: string;
	status: number;
	responseHeaders: Record<string, string | string[] | undefined>;
	responseText: string;
}

export interface OpenApiChecker {
	/** The document's operation for a concrete method and path (templated segments match any value). */
	operationOf(method: string, url: string): { template: string; op: Obj } | undefined;
	/** A value against a schema of the document (`#/components/schemas/<name>` or any schema object). */
	validate(schema: Obj, value: unknown): string | null;
	/** What in the exchange the document does not declare or allow; [] when nothing. */
	check(ex: Exchange): string[];
	/** The same, of the answer only (requests made wrong on purpose, to see their errors). */
	checkAnswer(ex: Pick<Exchange, "method" | "url" | "status" | "responseHeaders" | "responseText">): string[];
}

const header = (h: Exchange["requestHeaders"], name: string): string => {
	const v = h[name.toLowerCase()];
	return Array.isArray(v) ? v.join(", ") : (v ?? "");
};

export function openApiChecker(doc: Obj): OpenApiChecker {
	const ajv = new Ajv2020({ strict: false, allErrors: true, validateSchema: false });
	addFormats(ajv);
	ajv.addSchema(doc, "api");
	const compiled = new Map<string, ValidateFunction>();

	const deref = (o: Obj): Obj => {
		while (o && o.$ref)
			o = String(o.$ref)
				.replace(/^#\//, "")
				.split("/")
				.reduce((a: Obj, k) => a?.[k.replace(/~1/g, "/").replace(/~0/g, "~")], doc);
		return o;
	};

	function validate(schema: Obj, value: unknown): string | null {
		// The schema's references point into the document registered as `api`.
		const text = JSON.stringify(schema).replace(/"\$ref":"#\//g, '"$ref":"api#/');
		let v = compiled.get(text);
		if (!v) compiled.set(text, (v = ajv.compile(JSON.parse(text))));
		return v(value) ? null : ajv.errorsText(v.errors, { separator: "; " });
	}

	function operationOf(method: string, url: string) {
		const bare = url.split("?")[0];
		const candidates = Object.keys(doc.paths).filter((t) => {
			const re = new RegExp(
				`^${t
					.split(/\{[^}]+\}/)
					.map((s) => s.replace(/[.*+?^$()|[\]\\]/g, "\\$&"))
					.join("[^/]+")}$`,
			);
			return re.test(bare) && doc.paths[t][method.toLowerCase()];
		});
		// The most literal template wins (`/content/notes/count` before `/content/notes/{id}`).
		candidates.sort((a, b) => (a.match(/\{/g)?.length ?? 0) - (b.match(/\{/g)?.length ?? 0));
		const t = candidates[0];
		return t ? { template: t, op: doc.paths[t][method.toLowerCase()] as Obj } : undefined;
	}

	/** Whether the request carries a credential one of the security requirements names (`{}`: none needed). */
	function secured(op: Obj, ex: Exchange, query: URLSearchParams): boolean {
		const requirements: Obj[] = op.security ?? doc.security ?? [];
		if (!requirements.length) return true;
		const auth = header(ex.requestHeaders, "authorization");
		return requirements.some((req) =>
			Object.keys(req).every((name) => {
				const scheme = doc.components.securitySchemes[name];
				if (scheme.type === "http") return new RegExp(`^${scheme.scheme}\\s+\\S`, "i").test(auth);
				if (scheme.in === "query") return query.has(scheme.name);
				if (scheme.in === "cookie") return new RegExp(`(^|;\\s*)${scheme.name}=`).test(header(ex.requestHeaders, "cookie"));
				return header(ex.requestHeaders, scheme.name) !== "";
			}),
		);
	}

	function checkRequest(at: string, template: string, op: Obj, ex: Exchange): string[] {
		const problems: string[] = [];
		const query = new URLSearchParams(ex.url.includes("?") ? ex.url.slice(ex.url.indexOf("?") + 1) : "");
		const params = ((op.parameters ?? []) as Obj[]).map(deref);
		const segments = ex.url.split("?")[0].split("/");
		template.split("/").forEach((seg, i) => {
			const name = /^\{(.+)\}$/.exec(seg)?.[1];
			const p = name && params.find((x) => x.in === "path" && x.name === name);
			const bad = p ? validate(p.schema ?? {}, decodeURIComponent(segments[i])) : name ? "is not declared" : null;
			if (bad) problems.push(`${at}: path parameter ${name}: ${bad}`);
		});
		for (const name of new Set(query.keys())) {
			const p = params.find((x) => x.in === "query" && x.name === name);
			if (!p) problems.push(`${at}: query parameter ${name} is not declared`);
			else {
				const bad = validate(p.schema ?? {}, query.get(name));
				if (bad) problems.push(`${at}: query parameter ${name}: ${bad}`);
			}
		}
		for (const p of params) if (p.required && p.in === "query" && !query.has(p.name)) problems.push(`${at}: required query parameter ${p.name} is missing`);
		if (!secured(op, ex, query)) problems.push(`${at}: carries no credential its security asks for`);
		const type = header(ex.requestHeaders, "content-type").split(";")[0].trim().toLowerCase();
		if (!ex.requestBody) {
			if (op.requestBody?.required) problems.push(`${at}: the request body is required`);
			return problems;
		}
		const content = op.requestBody?.content as Obj | undefined;
		if (!content) return [...problems, `${at}: takes no request body`];
		if (!content[type]) return [...problems, `${at}: request body type ${type || "(none)"} is not declared (declared: ${Object.keys(content).join(", ")})`];
		let body: unknown;
		if (type === "application/json") {
			try {
				body = JSON.parse(ex.requestBody);
			} catch {
				return [...problems, `${at}: the request body is not JSON`];
			}
		} else if (type === "application/x-www-form-urlencoded") {
			const form: Obj = {};
			for (const [k, v] of new URLSearchParams(ex.requestBody)) form[k] = k in form ? [...[form[k]].flat(), v] : v;
			body = form;
		} else return problems;
		const bad = validate(content[type].schema ?? {}, body);
		if (bad) problems.push(`${at}: request body: ${bad}`);
		return problems;
	}

	function checkResponse(at: string, op: Obj, ex: Pick<Exchange, "status" | "responseHeaders" | "responseText">): string[] {
		const declared = op.responses?.[String(ex.status)] ?? op.responses?.default;
		if (!declared) return [`${at} -> ${ex.status}: status not declared (declared: ${Object.keys(op.responses ?? {}).join(", ")})`];
		const response = deref(declared);
		const type = header(ex.responseHeaders, "content-type").split(";")[0].trim().toLowerCase();
		if (!response.content) return ex.responseText ? [`${at} -> ${ex.status}: a body the document does not declare`] : [];
		const media = response.content[type];
		if (!media) return [`${at} -> ${ex.status}: content type ${type || "(none)"} is not declared (declared: ${Object.keys(response.content).join(", ")})`];
		if (type !== "application/json" || !media.schema) return [];
		let body: unknown;
		try {
			body = JSON.parse(ex.responseText);
		} catch {
			return [`${at} -> ${ex.status}: the body is not JSON`];
		}
		const bad = validate(media.schema, body);
		return bad ? [`${at} -> ${ex.status}: ${bad} in ${ex.responseText.slice(0, 300)}`] : [];
	}

	function checked(ex: Pick<Exchange, "method" | "url">, parts: (named: string, op: Obj, template: string) => string[]): string[] {
		const found = operationOf(ex.method, ex.url);
		if (!found) return [`${ex.method} ${ex.url.split("?")[0]}: no operation in the document`];
		return parts(`${ex.method} ${found.template}`, found.op, found.template);
	}

	return {
		operationOf,
		validate,
		check: (ex) => checked(ex, (named, op, template) => [...checkRequest(named, template, op, ex), ...checkResponse(named, op, ex)]),
		checkAnswer: (ex) => checked(ex, (named, op) => checkResponse(named, op, ex)),
	};
}

/**
 * A recording proxy in front of `upstream` (http://host:port): every request passes through unchanged and is
 * recorded with its answer once the answer ends (streams included, passed on as they come).
 */
export async function recordingProxy(upstream: string): Promise<{ url: string; exchanges: Exchange[]; close(): Promise<void> }> {
	const target = new URL(upstream);
	const exchanges: Exchange[] = [];
	const server = http.createServer((req, res) => {
		const body: Buffer[] = [];
		req.on("data", (c: Buffer) => body.push(c));
		req.on("end", () => {
			const requestBody = Buffer.concat(body);
			const out = http.request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: { ...req.headers, host: target.host } }, (answer) => {
				res.writeHead(answer.statusCode ?? 502, answer.headers);
				const chunks: Buffer[] = [];
				answer.on("data", (c: Buffer) => {
					chunks.push(c);
					res.write(c);
				});
				answer.on("end", () => {
					res.end();
					exchanges.push({
						method: req.method ?? "GET",
						url: req.url ?? "/",
						requestHeaders: req.headers,
						requestBody: requestBody.toString("utf8"),
						status: answer.statusCode ?? 0,
						responseHeaders: answer.headers,
						responseText: Buffer.concat(chunks).toString("utf8"),
					});
				});
			});
			out.on("error", () => res.destroy());
			out.end(requestBody);
		});
	});
	await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
	const { port } = server.address() as AddressInfo;
	return {
		url: `http://127.0.0.1:${port}`,
		exchanges,
		close: () =>
			new Promise<void>((r) => {
				server.closeAllConnections();
				server.close(() => r());
			}),
	};
}
