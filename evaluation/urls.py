from __future__ import annotations

from django.urls import path

from . import views

# Included under "evaluations/" by config/urls.py.
urlpatterns = [
    path("", views.run_list, name="evaluation-list"),
    path("compare/", views.run_compare, name="evaluation-compare"),
    path("<int:pk>/", views.run_detail, name="evaluation-detail"),
    path("<int:pk>.json", views.run_json, name="evaluation-json"),
    path("<int:pk>.md", views.run_markdown, name="evaluation-markdown"),
]
