"""An evaluation run: a question set answered by real sessions, each answer graded against
its reference (evaluation/grading.py). Rows are written by `manage.py evaluate`; the pages
and the admin only read them."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.urls import reverse

from thinking.models import ThinkingSession


class Grade(models.TextChoices):
    CORRECT = "correct", "Correct"
    INCORRECT = "incorrect", "Incorrect"
    NOT_ATTEMPTED = "not_attempted", "Not attempted"


class ItemStatus(models.TextChoices):
    PENDING = "pending", "Not started"
    THINKING = "thinking", "Thinking"
    GRADED = "graded", "Graded"
    FAILED = "failed", "Failed (tried again on resume)"


class EvaluationRun(models.Model):
    """One named run of a question set with one set of session settings. The same name
    resumes it: graded questions are kept, the rest are asked (or finished) again."""

    name = models.CharField(max_length=100, unique=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="evaluation_runs"
    )
    question_set = models.CharField(max_length=500, help_text="A shipped set's name or a path.")
    # minutes, model, web, research, concurrency: what every session of the run is started with.
    options = models.JSONField(default=dict, blank=True)
    max_dollars = models.DecimalField(
        max_digits=10, decimal_places=2, help_text="Ceiling for the whole run, at list prices."
    )
    grader_model = models.CharField(max_length=100, blank=True)
    offline = models.BooleanField(
        default=False, help_text="Run against a local fake model: its figures mean nothing."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    stop_reason = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("evaluation-detail", args=[self.pk])

    def spent(self) -> Decimal:
        """Dollars spent so far: its sessions' model calls and the grader's."""
        sessions = ThinkingSession.objects.filter(evaluation_items__run=self).aggregate(
            total=models.Sum("cost_usd")
        )["total"] or Decimal(0)
        own = self.items.aggregate(
            grading=models.Sum("grader_cost_usd"), earlier=models.Sum("earlier_cost_usd")
        )
        return sessions + (own["grading"] or Decimal(0)) + (own["earlier"] or Decimal(0))


class EvaluationItem(models.Model):
    """One question of a run: its session, the graded answer and what it cost."""

    run = models.ForeignKey(EvaluationRun, on_delete=models.CASCADE, related_name="items")
    position = models.PositiveIntegerField(help_text="Its row in the question set, from 0.")
    question = models.TextField()
    reference = models.TextField(help_text="The reference answer.")
    session = models.ForeignKey(
        ThinkingSession,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="evaluation_items",
    )
    status = models.CharField(max_length=16, choices=ItemStatus.choices, default=ItemStatus.PENDING)
    grade = models.CharField(max_length=16, choices=Grade.choices, blank=True)
    grader_why = models.TextField(blank=True)
    grader_input_tokens = models.PositiveIntegerField(default=0)
    grader_output_tokens = models.PositiveIntegerField(default=0)
    grader_cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    earlier_cost_usd = models.DecimalField(
        max_digits=12, decimal_places=6, default=0, help_text="Spent by failed earlier attempts."
    )
    error = models.TextField(blank=True)
    graded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "position"]
        constraints = [
            models.UniqueConstraint(fields=["run", "position"], name="one_item_per_position")
        ]

    def __str__(self) -> str:
        return f"{self.run} #{self.position}: {self.grade or self.status}"
