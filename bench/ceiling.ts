/**
 * The ceiling: a bare moleculer-web route answering a fixed document of the same size as a stored one, on a broker
 * with the platform's own broker options (same metrics setup), so the ratio isolates the platform's own cost.
 */
import { readFileSync } from "fs";
import { ServiceBroker } from "moleculer";
import ApiGateway from "moleculer-web";
import brokerOptions from "../moleculer.config";
import { readConfig } from "../runtime/config";

const doc = JSON.parse(readFileSync(process.env.CEILING_DOC!, "utf8"));
const cfg = { ...readConfig(), logLevel: "warn" };
const broker = new ServiceBroker({ ...brokerOptions(cfg), middlewares: [] });
broker.createService({ name: "ceiling", actions: { doc: () => ({ data: doc }) } });
broker.createService({
	name: "api",
	mixins: [ApiGateway],
	settings: { port: cfg.port, ip: "127.0.0.1", routes: [{ path: "", mappingPolicy: "restrict", aliases: { "GET /doc": "ceiling.doc" } }], logRequest: null, logResponse: null },
});
broker.start();
