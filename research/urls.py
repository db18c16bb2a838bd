from __future__ import annotations

from django.urls import path

from . import views

# Included under "knowledge/" by config/urls.py.
urlpatterns = [
    path("", views.knowledge_list, name="knowledge-list"),
    path("add/", views.knowledge_add, name="knowledge-add"),
    path("upload/", views.knowledge_upload, name="knowledge-upload"),
    path("<int:pk>/", views.knowledge_detail, name="knowledge-detail"),
    path("<int:pk>/delete/", views.knowledge_delete, name="knowledge-delete"),
]
