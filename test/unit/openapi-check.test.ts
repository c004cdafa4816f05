/**
 * The checker the guide's test replays its requests through (test/helpers/openapi-check.ts) finds what a validating
 * proxy would: each kind of departure from the document is one problem, and the documented exchange none.
 */
import { openApiDocument } from "../../lib/openapi";
import { openApiChecker, type Exchange } from "../helpers/openapi-check";

const checker = openApiChecker(openApiDocument() as Record<string, unknown>);
const ID = "65f1c0a2b3c4d5e6f7a8b9c0";
const note = { id: ID, title: "n" };
const json = { "content-type": "application/json; charset=utf-8" };
const exchange = (over: Partial<Exchange>): Exchange => ({
	method: "GET",
	url: `/content/notes/${ID}`,
	requestHeaders: { authorization: "Bearer eyJ" },
	requestBody: "",
	status: 200,
	responseHeaders: json,
	responseText: JSON.stringify({ data: note }),
	...over,
});

test("a documented exchange has no problem; the token form with HTTP Basic neither", () => {
	expect(checker.check(exchange({}))).toEqual([]);
	const basic = exchange({
		method: "POST",
		url: "/auth/token",
		requestHeaders: { authorization: `Basic ${Buffer.from(`${ID}:s3cret`).toString("base64")}`, "content-type": "application/x-www-form-urlencoded" },
		requestBody: "grant_type=client_credentials",
		responseText: JSON.stringify({ data: { token_type: "Bearer", access_token: "eyJ", expires_in: 3600, scope: "whole" } }),
	});
	expect(checker.check(basic)).toEqual([]);
});

test("each departure is named", () => {
	expect(checker.check(exchange({ url: "/nowhere" }))).toEqual(["GET /nowhere: no operation in the document"]);
	expect(checker.check(exchange({ status: 418 }))).toEqual([expect.stringMatching(/^GET \/content\/notes\/\{id\} -> 418: status not declared/)]);
	expect(checker.check(exchange({ responseText: JSON.stringify({ data: { title: "no id" } }) }))).toEqual([expect.stringContaining("must have required property 'id'")]);
	expect(checker.check(exchange({ responseHeaders: { "content-type": "text/html" } }))).toEqual([expect.stringContaining("content type text/html is not declared")]);
	expect(checker.check(exchange({ url: `/content/notes/${ID}?limit=5` }))).toEqual(["GET /content/notes/{id}: query parameter limit is not declared"]);
	expect(checker.check(exchange({ requestHeaders: {} }))).toEqual(["GET /content/notes/{id}: carries no credential its security asks for"]);
	expect(checker.check(exchange({ url: "/api-json/nope", requestHeaders: {}, responseText: "{}" }))).toEqual([
		"GET /api-json/{service}: path parameter service: data must be equal to one of the allowed values",
	]);
	// The bearer also as ?token= or the cookie.
	expect(checker.check(exchange({ requestHeaders: {}, url: `/content/notes/${ID}?token=eyJ` }))).toEqual([]);
	expect(checker.check(exchange({ requestHeaders: { cookie: "a=1; authorization=eyJ" } }))).toEqual([]);
	const create = (body: unknown, type = "application/json") =>
		exchange({ method: "POST", url: "/content/notes", requestHeaders: { authorization: "Bearer eyJ", "content-type": type }, requestBody: JSON.stringify(body) });
	expect(checker.check(create({ title: "ok" }))).toEqual([]);
	expect(checker.check(create({ title: "ok", owner: ID }))).toEqual([expect.stringContaining("request body: data must NOT have additional properties")]);
	expect(checker.check(create({ title: "ok" }, "text/plain"))).toEqual([expect.stringContaining("request body type text/plain is not declared")]);
	const form = exchange({ method: "POST", url: "/auth/token", requestHeaders: { "content-type": "application/x-www-form-urlencoded" }, requestBody: "client_id=x" });
	expect(checker.check(form)).toEqual([
		expect.stringContaining("request body: data must have required property 'grant_type'"),
		expect.stringContaining("data/data must have required property 'token_type'"),
	]);
});
