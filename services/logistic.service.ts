/** logistic: the standard collection pattern on every collection of the domain (catalog/domains/logistic.ts). */
import type { ServiceSchema } from "moleculer";
import { logistic } from "../catalog/domains/logistic";
import { collectionMixin } from "../mixins/collection.mixin";

const LogisticService: ServiceSchema = { name: "logistic", mixins: [collectionMixin(logistic)] };

export default LogisticService;
