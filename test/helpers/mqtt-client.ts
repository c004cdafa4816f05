/** What the suites ask of an MQTT connection through the client library. */
import type { MqttClient } from "mqtt";

/** The QoS the broker granted to `filter`, or 128 when it refused the subscription (mqtt.js rejects such a SUBACK). */
export async function subscribe(c: MqttClient, filter: string): Promise<number> {
	try {
		return (await c.subscribeAsync(filter, { qos: 1 }))[0].qos;
	} catch (err) {
		const granted = (err as { packet?: { granted?: Array<number | { qos: number }> } }).packet?.granted;
		if (granted?.length) return typeof granted[0] === "number" ? granted[0] : granted[0].qos;
		throw err;
	}
}
