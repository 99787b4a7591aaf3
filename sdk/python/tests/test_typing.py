import inspect
import typing
import unittest

import jobsvc
from jobsvc import client as client_module


def public_functions():
    """Every public function and method a user reaches from the package: its exports and the
    resources a Client holds (client.jobs, client.webhooks, ...)."""
    resources = [type(value) for value in vars(jobsvc.Client("http://127.0.0.1:1", "key")).values() if isinstance(value, client_module._Resource)]
    classes = [value for name in jobsvc.__all__ if inspect.isclass(value := getattr(jobsvc, name))] + resources
    yield from ((name, getattr(jobsvc, name)) for name in jobsvc.__all__ if inspect.isfunction(getattr(jobsvc, name)))
    for cls in classes:
        for name, member in inspect.getmembers(cls):
            if isinstance(member, property):
                member = member.fget
            if inspect.isfunction(member) and (not name.startswith("_") or name == "__init__") and member.__module__.startswith("jobsvc"):
                yield "%s.%s" % (cls.__name__, name), member


class TypingTest(unittest.TestCase):
    def test_the_package_is_marked_typed(self):
        self.assertTrue(inspect.getfile(jobsvc).endswith("__init__.py"))
        with open(inspect.getfile(jobsvc).replace("__init__.py", "py.typed")) as marker:
            self.assertEqual(marker.read(), "")

    def test_every_public_function_is_annotated_with_names_that_resolve(self):
        functions = dict(public_functions())
        self.assertIn("Jobs.create", functions)
        self.assertIn("Worker.__init__", functions)
        for name, function in functions.items():
            with self.subTest(name):
                signature = inspect.signature(function)
                unannotated = [p.name for p in signature.parameters.values() if p.name != "self" and p.annotation is inspect.Parameter.empty]
                self.assertEqual(unannotated, [], "parameters without a type")
                self.assertIsNot(signature.return_annotation, inspect.Signature.empty, "no return type")
                typing.get_type_hints(function)


if __name__ == "__main__":
    unittest.main()
