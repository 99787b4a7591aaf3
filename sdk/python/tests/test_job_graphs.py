"""Workflows (issue 30) through the Python SDK: depends_on and on_parent_failure on creates,
Jobs.dependencies(), and the worker handing a graph job its parents' results (ctx.parent_results).
test/sdk/job-graphs.test.ts starts the service and runs this module."""

import threading
import unittest

import jobsvc

from .service import client, job_reaches, needs_service
from .test_worker import recording_logger


@needs_service
class JobGraphsTest(unittest.TestCase):
    def setUp(self):
        self.client = client()

    def test_the_diamond_hands_the_fan_in_both_branches_results(self):
        queue = "py-diamond"
        seen, lock = {}, threading.Lock()

        def step(job, ctx):
            with lock:
                seen[job["id"]] = (ctx.parent_results, job.get("parent_results"))
            inputs = sum(r["total"] for r in ctx.parent_results.values())
            return {"name": job["payload"]["name"], "total": job["payload"]["value"] + inputs}

        def create(name, value, parents=None):
            fields = {} if parents is None else {"depends_on": [p["id"] for p in parents], "on_parent_failure": "cancel"}
            return self.client.jobs.create(job_type="step", queue=queue, payload={"name": name, "value": value}, **fields)

        # Every job exists before the worker polls, so that each parent's end is what activates its children.
        a = create("A", 1)
        b = create("B", 10, [a])
        c = create("C", 100, [a])
        d = create("D", 1000, [b, c])
        self.assertEqual((d["state"], d["depends_on"], d["waiting_for"]), ("scheduled", [b["id"], c["id"]], [b["id"], c["id"]]))

        logger, records = recording_logger("job-graphs")
        worker = jobsvc.Worker(self.client, queues=[queue], handlers={"step": step}, concurrency=4, logger=logger)
        worker.start()
        self.addCleanup(worker.stop)

        done = job_reaches(self.client, d["id"], "succeeded")
        self.assertEqual(done["result"], {"name": "D", "total": 1000 + 11 + 101}, "built from B's and C's results")
        handed, polled = seen[d["id"]]
        self.assertEqual(handed, {b["id"]: {"name": "B", "total": 11}, c["id"]: {"name": "C", "total": 101}})
        self.assertEqual(polled, handed, "the same as the poll answer carried")
        self.assertEqual(seen[b["id"]][0], {a["id"]: {"name": "A", "total": 1}}, "B saw A's result")
        self.assertEqual(seen[a["id"]], ({}, None), "a job without parents is handed none")

        deps = self.client.jobs.dependencies(d["id"])
        self.assertEqual((deps["state"], deps["on_parent_failure"], deps["waiting_for"]), ("succeeded", "cancel", 0))
        self.assertEqual(
            [(p["job_id"], p["state"], p["result"], p["waiting"]) for p in deps["parents"]],
            [(b["id"], "succeeded", {"name": "B", "total": 11}, False), (c["id"], "succeeded", {"name": "C", "total": 101}, False)],
        )
        self.assertEqual((deps["children"], deps["children_total"]), ([], 0))
        root = self.client.jobs.dependencies(a["id"])
        self.assertEqual(root["children"], [{"job_id": b["id"], "state": "succeeded"}, {"job_id": c["id"], "state": "succeeded"}])
        self.assertEqual(records.messages("WARNING") + records.messages("ERROR"), [])

    def test_a_batch_item_takes_depends_on_and_a_bad_one_is_refused(self):
        parent = self.client.jobs.create(job_type="py-graph-batch", queue="py-graph-batch", payload={})
        batch = self.client.jobs.create_batch(
            [{"job_type": "py-graph-batch", "queue": "py-graph-batch", "payload": {}, "depends_on": [parent["id"]], "on_parent_failure": "run"}]
        )
        self.assertEqual(batch["results"][0]["status"], 201)
        child = self.client.jobs.get(batch["results"][0]["body"]["id"])
        self.assertEqual((child["state"], child["depends_on"], child["on_parent_failure"]), ("scheduled", [parent["id"]], "run"))
        with self.assertRaises(jobsvc.JobsvcError) as caught:
            self.client.jobs.create(job_type="py-graph-batch", payload={}, depends_on=[])
        self.assertEqual((caught.exception.status, caught.exception.code), (400, "invalid_request"))
        with self.assertRaises(jobsvc.JobsvcError) as caught:
            self.client.jobs.dependencies("job_01ARZ3NDEKTSV4RRFFQ69G5FAV")
        self.assertEqual((caught.exception.status, caught.exception.code), (404, "job_not_found"))


if __name__ == "__main__":
    unittest.main()
